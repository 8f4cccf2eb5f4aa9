"""Which version of each Kafka API the client speaks to one broker: a pure function of both ranges.

The client's range per API is the codec's (protocol/kafka/apis.py) capped at
what the translators in this package build and read: Produce from v3 (Kafka
4's floor), topic names rather than ids (Produce and Fetch below v13, the
group APIs' commit and offset fetch below their id and multi-group versions,
DescribeGroups below v6, whose unknown group is an error, not state Dead).
ApiVersions negotiation picks, per API, the highest version both sides
support (Kafka's NetworkClient does the same); an API the broker lacks, or
whose range does not overlap ours, has no version and a call to it fails
with UNSUPPORTED_VERSION.
Notes: docs/client.md, section "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import API_VERSIONS, PRODUCE_REFUSED_BELOW, SUPPORTED_APIS

# The versions the translators do not read or build (topic ids, multi-group requests).
_CLIENT_MAX = {
    0: 12,  # Produce v13 names topics by id
    1: 12,  # Fetch v13 names topics by id
    8: 9,  # OffsetCommit v10 names topics by id
    9: 7,  # OffsetFetch v8 asks for many groups in one request
    15: 5,  # DescribeGroups v6 answers GROUP_ID_NOT_FOUND for a group the client reads as "Dead" (KIP-1043)
    24: 3,  # AddPartitionsToTxn v4 is the brokers' batched form (KIP-890); clients speak v0-v3
}
_CLIENT_MIN = {0: PRODUCE_REFUSED_BELOW}
# ApiVersions v3 carries the client's software name (KIP-511); a broker without it answers
# UNSUPPORTED_VERSION in a v0 body listing its versions, and the client asks again in v0.
API_VERSIONS_FIRST = 3
API_VERSIONS_FALLBACK = 0


def client_range(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions this client can speak of `api_key`, None for an API it does not know."""
    api = SUPPORTED_APIS.get(api_key)
    if api is None:
        return None
    low = max(api.min_version, _CLIENT_MIN.get(api_key, api.min_version))
    high = min(api.max_version, _CLIENT_MAX.get(api_key, api.max_version))
    return (low, high) if low <= high else None


def choose_version(api_key: int, broker_min: int, broker_max: int) -> int | None:
    """The highest version of `api_key` both sides support, None when the ranges do not overlap."""
    ours = client_range(api_key)
    if ours is None:
        return None
    low, high = max(ours[0], broker_min), min(ours[1], broker_max)
    return high if low <= high else None


def negotiate(broker_apis: Iterable[tuple[int, int, int]]) -> dict[int, int]:
    """{api_key: version} from an ApiVersions answer's (api_key, min_version, max_version) entries."""
    chosen: dict[int, int] = {}
    for api_key, low, high in broker_apis:
        version = choose_version(api_key, low, high)
        if version is not None:
            chosen[api_key] = version
    return chosen


def version_for(versions: Mapping[int, int], api_key: int, where: str) -> int:
    """The negotiated version of `api_key`, or UNSUPPORTED_VERSION naming the API and the broker."""
    version = versions.get(api_key)
    if version is None:
        api = SUPPORTED_APIS.get(api_key)
        name = api.name if api is not None else f"API key {api_key}"
        raise KafkaError(f"{where} supports no version of {name} this client speaks", ErrorCode.UNSUPPORTED_VERSION)
    return version


def retry_api_versions_at(error_code: int, broker_apis: Iterable[tuple[int, int, int]]) -> int | None:
    """After an ApiVersions answer with an error: the version to ask again in (KIP-511), None to give up."""
    if error_code != ErrorCode.UNSUPPORTED_VERSION:
        return None
    for api_key, low, high in broker_apis:
        if api_key == API_VERSIONS and low <= high:
            return min(high, API_VERSIONS_FIRST - 1) if high >= API_VERSIONS_FIRST else high
    return API_VERSIONS_FALLBACK
