"""ApiVersions' answers (broker/kafka/api_versions.py): the ranges served, KIP-511's checks and fallback."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata.api_versions import ApiVersionsRequest

from kraftpy.broker.kafka.api_versions import api_versions_answer, unsupported_version_answer
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.apis import API_VERSIONS, SUPPORTED_APIS

SERVED = frozenset({API_VERSIONS, 3})


def _request(name: str | None, version_text: str | None) -> ApiVersionsRequest:
    return ApiVersionsRequest(version=3, client_software_name=name, client_software_version=version_text)


@pytest.mark.parametrize(
    ("name", "version_text"),
    [
        ("librdkafka", "2.16.0"),
        ("kafka-python", "3.0.12"),
        ("confluent-kafka-python", "2.16.0-rdkafka-2.16.0"),
        ("a", "1"),
    ],
)
def test_real_clients_software_names_get_the_ranges(name: str, version_text: str) -> None:
    answer = api_versions_answer(_request(name, version_text), 3, SERVED)
    assert answer.error_code == 0
    assert {k.api_key for k in answer.api_keys} == SERVED


@pytest.mark.parametrize(
    ("name", "version_text"),
    [("", "1"), ("lib rd", "1"), ("-lead", "1"), ("trail-", "1"), ("ok", "1.0 beta"), ("ok", ""), ("ünï", "1")],
)
def test_a_software_name_kip_511_does_not_allow_is_an_invalid_request(name: str, version_text: str) -> None:
    answer = api_versions_answer(_request(name, version_text), 3, SERVED)
    assert answer.error_code == ErrorCode.INVALID_REQUEST
    assert answer.api_keys == []


@pytest.mark.parametrize("version", [0, 1, 2])
def test_versions_before_3_carry_no_software_name_to_check(version: int) -> None:
    answer = api_versions_answer(ApiVersionsRequest(version=version), version, SERVED)
    assert answer.error_code == 0


def test_the_unsupported_version_answer_is_v0_and_lists_what_is_served() -> None:
    header, answer = unsupported_version_answer(42, SERVED)
    assert (header.api_key, header.api_version, header.correlation_id) == (API_VERSIONS, 0, 42)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
    ranges = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    api = SUPPORTED_APIS[API_VERSIONS]
    assert ranges[API_VERSIONS] == (api.min_version, api.max_version)
    assert set(ranges) == SERVED
