"""The idempotent producer never livelocks when a later batch reaches the leader before an earlier one.

Issue 11 §2: a new producer's first two batches for a partition (A: sequence 0, B: the next
one) were written to the socket out of order while the stream to the leader was connecting, so
the leader saw B first. With no state for the producer yet, B was refused with
UNKNOWN_PRODUCER_ID; A was then appended. The client took B's answer as "the broker lost my
state", bumped the epoch and renumbered every batch of the partition -- A included, although A
was still on the wire under the old epoch. A's acknowledgement was then counted under the new
epoch, so the client believed the new epoch's sequences 0.. were written while the broker had
never seen that epoch: every retry of B (new epoch, sequence > 0) was refused as
OUT_OF_ORDER_SEQUENCE_NUMBER and retried again, until delivery_timeout_ms. Nothing waited on
any broker and the client sat idle between retries: the stall as observed.

The broker side here is the real ProducerStateManager (the leader's sequence check); only the
network is the test's: it delivers requests in the order it chooses and answers at once.
"""

from __future__ import annotations

from kraftpy.broker.replication.producer_state import ProducerStateManager
from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.records.header import parse_header
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import produce_answer, producer_core

TP = TopicPartition("t", 0)
LEADERS = {("t", 0): (1, 0)}


class Leader:
    """One partition's leader: the real sequence check, then an append to a list."""

    def __init__(self) -> None:
        self.producers = ProducerStateManager()
        self.values: list[bytes] = []

    def produce(self, records: bytes) -> dict[str, int]:
        header = parse_header(records, 0, check_crc=True)
        check = self.producers.check_append(header)
        if check.error != ErrorCode.NONE:
            return {"error_code": int(check.error), "log_start_offset": 0}
        if check.duplicate is not None:
            return {"base_offset": check.duplicate.first_offset}
        base = len(self.values)
        self.values += [r.value for r in decode_batch(records).records]
        self.producers.update(header, base, len(self.values) - 1)
        return {"base_offset": base}


def test_a_later_batch_that_overtakes_the_first_one_is_retried_not_renumbered() -> None:
    core = producer_core(LEADERS, batch_size=100, retry_backoff_ms=10, retry_backoff_max_ms=10)
    leader = Leader()
    for i in range(3):
        core.send(TP, b"a%d" % i, now_ms=0)
    (first,) = core.sender.poll(0).requests
    for i in range(3):
        core.send(TP, b"b%d" % i, now_ms=1)
    (second,) = core.sender.poll(1).requests
    assert decode_batch(second.batches[TP].records).header.base_sequence == 3

    # The second request reaches the leader first, and its answer comes back first.
    answer = leader.produce(second.body["topics"][0]["partitions"][0]["records"])
    assert answer["error_code"] == ErrorCode.UNKNOWN_PRODUCER_ID
    core.sender.handle_response(second.request_id, produce_answer({TP: answer}), 2)
    core.sender.poll(3)  # a send round runs between the two answers (an epoch bump would happen here)
    core.sender.handle_response(
        first.request_id, produce_answer({TP: leader.produce(first.body["topics"][0]["partitions"][0]["records"])}), 4
    )

    # From here on the network is perfect: every request is delivered and answered in order.
    now_ms = 4
    for _ in range(200):
        if not core.sender.has_pending_work():
            break
        now_ms += 10
        for request in core.sender.poll(now_ms).requests:
            (records,) = [p["records"] for t in request.body["topics"] for p in t["partitions"]]
            core.sender.handle_response(request.request_id, produce_answer({TP: leader.produce(records)}), now_ms)
    assert core.delivery.errors == []
    assert sorted(core.delivery.offsets) == [0, 1, 2, 3, 4, 5], "every record acknowledged once"
    assert leader.values == [b"a0", b"a1", b"a2", b"b0", b"b1", b"b2"], "written once each, in order"
