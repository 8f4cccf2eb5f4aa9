"""ApiVersions (KIP-511): the APIs and versions this broker serves, and the v0 answer to a version it does not."""

from __future__ import annotations

import re
from collections.abc import Collection

from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.apis import SUPPORTED_APIS
from kraftpy.protocol.kafka.codec import RequestHeader


def api_versions_response(
    served: Collection[int] = frozenset(SUPPORTED_APIS), error: ErrorCode = ErrorCode.NONE
) -> ApiVersionsResponse:
    """The version ranges of the `served` APIs (Produce v0-v2 included: KAFKA-18659), with `error`."""
    keys = [
        ApiVersionsResponse.ApiVersion(api_key=r.api_key, min_version=r.min_version, max_version=r.max_version)
        for r in sorted(SUPPORTED_APIS.values(), key=lambda r: r.api_key)
        if r.api_key in served
    ]
    return ApiVersionsResponse(error_code=int(error), api_keys=keys, throttle_time_ms=0)


# KIP-511: what a client's software name and version may look like (Kafka's ApiVersionsRequest.isValid).
_SOFTWARE = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def api_versions_answer(
    request: ApiVersionsRequest, version: int, served: Collection[int] = frozenset(SUPPORTED_APIS)
) -> ApiVersionsResponse:
    """The answer to an ApiVersions request: the ranges, or INVALID_REQUEST (and none) when v3+ names
    its client software in a way KIP-511 does not allow, as Kafka answers."""
    if version >= 3:
        for value in (request.client_software_name, request.client_software_version):
            if value is None or not _SOFTWARE.fullmatch(value):
                return ApiVersionsResponse(error_code=int(ErrorCode.INVALID_REQUEST), api_keys=[], throttle_time_ms=0)
    return api_versions_response(served)


def unsupported_version_answer(
    correlation_id: int, served: Collection[int] = frozenset(SUPPORTED_APIS)
) -> tuple[RequestHeader, ApiVersionsResponse]:
    """A too-new ApiVersions request's answer: UNSUPPORTED_VERSION in a v0 body that lists what we serve,
    so the client retries with a version from the list (KIP-511)."""
    header = RequestHeader(api_key=18, api_version=0, correlation_id=correlation_id)
    return header, api_versions_response(served, ErrorCode.UNSUPPORTED_VERSION)
