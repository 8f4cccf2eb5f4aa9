"""The fault run's producer workload tells a fault's indeterminate outcome from a client bug."""

from __future__ import annotations

import pytest

from kraftpy.client.errors import KafkaTimeoutError
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.tools.faults.workload import indeterminate


@pytest.mark.parametrize(
    "exc",
    [
        KafkaTimeoutError("Expiring 2 record(s)", ErrorCode.REQUEST_TIMED_OUT),
        TimeoutError(),
        KafkaError("leader moved", ErrorCode.NOT_LEADER_OR_FOLLOWER),
        KafkaError("too few in sync", ErrorCode.NOT_ENOUGH_REPLICAS),
        KafkaError("connection lost", ErrorCode.NETWORK_EXCEPTION),
    ],
)
def test_timeouts_and_retriable_errors_are_indeterminate(exc: BaseException) -> None:
    assert indeterminate(exc)


@pytest.mark.parametrize(
    "exc",
    [
        TypeError("send() got an unexpected keyword"),
        AttributeError("'NoneType' object has no attribute 'leader'"),
        KafkaError("batch rejected", ErrorCode.INVALID_RECORD),
        KafkaError("sequence gap", ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    ],
)
def test_client_bugs_and_definite_errors_fail_the_run(exc: BaseException) -> None:
    assert not indeterminate(exc)
