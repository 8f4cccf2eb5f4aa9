"""The fault runs' librdkafka child ends a transaction as librdkafka asks: retriable errors are resumed.

A commit whose answer timed out is still in progress in librdkafka; calling commit_transaction again
resumes it. Aborting instead, after the coordinator had completed the commit, was refused as
INVALID_TXN_STATE (fatal for librdkafka), and the run recorded the transaction as unknown (seeds
2304-2308, session 23). The producer here is a stand-in for the one call; the session is the real one.
"""

from __future__ import annotations

from typing import Any

import confluent_kafka as ck
import pytest

from kraftpy.tools.faults.workloads.clients import ClientSpec
from kraftpy.tools.faults.workloads.confluent_worker import ConfluentSession


class Ends:
    """commit_transaction / abort_transaction answering with `errors` in turn, then success."""

    def __init__(self, *errors: ck.KafkaError) -> None:
        self.errors = list(errors)
        self.calls: list[float] = []

    def __call__(self, timeout_s: float) -> None:
        self.calls.append(timeout_s)
        if self.errors:
            raise ck.KafkaException(self.errors.pop(0))


@pytest.fixture
def session() -> Any:
    s = ConfluentSession(ClientSpec("127.0.0.1:1", "t", 1, "assign", True, "g"), 0, 0)
    yield s
    s.consumer.close()


def test_a_retriable_commit_error_is_resumed_by_committing_again(session: Any) -> None:
    ends = Ends(ck.KafkaError(ck.KafkaError._TIMED_OUT, "commit timed out", retriable=True))
    session._end_txn(ends)
    assert len(ends.calls) == 2 and all(0 < t <= 8.0 for t in ends.calls)


def test_an_error_that_is_not_retriable_is_raised_at_once(session: Any) -> None:
    ends = Ends(ck.KafkaError(ck.KafkaError.INVALID_TXN_STATE, "no", fatal=True))
    with pytest.raises(ck.KafkaException):
        session._end_txn(ends)
    assert len(ends.calls) == 1


def test_retries_stop_at_the_bound(session: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from kraftpy.tools.faults.workloads import confluent_worker

    monkeypatch.setattr(confluent_worker, "INNER_TIMEOUT_S", 0.0)
    ends = Ends(*[ck.KafkaError(ck.KafkaError._TIMED_OUT, "again", retriable=True)] * 3)
    with pytest.raises(ck.KafkaException):
        session._end_txn(ends)
    assert len(ends.calls) == 1
