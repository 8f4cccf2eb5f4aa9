"""Property: under any interleaving of lost, reordered and refused requests and answers, the
idempotent producer core never writes a record twice, keeps each partition's order, reports
each record once at the offset it really has, and never gives one (epoch, sequence) two records.

The test drives the real sender core. The only stand-in is a few lines that apply Kafka's
broker-side sequence rule to a list per partition (accept the next sequence, answer a
duplicate with its original offset, refuse a gap, fence an older epoch), so that answers are
ones a broker could give. Hypothesis chooses which request is delivered next and what
happens to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.records.batch import decode_batch
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_client_fixtures import produce_answer, producer_core

PARTITIONS = [TopicPartition("t", 0), TopicPartition("t", 1)]
LEADERS = {("t", 0): (1, 0), ("t", 1): (1, 0)}


@dataclass
class PartitionLog:
    """Kafka's per-producer sequence check on one partition (ProducerStateManager), plus the log."""

    records: list[bytes] = field(default_factory=list)
    epoch: int = -1
    last_seq: int = -1
    recent: list[tuple[int, int, int]] = field(default_factory=list)  # (first_seq, last_seq, base_offset), last 5

    def append(self, epoch: int, first_seq: int, values: list[bytes]) -> tuple[int, int]:
        last = first_seq + len(values) - 1
        if epoch < self.epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH, -1
        if epoch > self.epoch:
            if first_seq != 0:
                # kraftpy's leader (ProducerStateManager, pre-KIP-360): no state for the producer yet.
                unknown = self.epoch == -1
                return ErrorCode.UNKNOWN_PRODUCER_ID if unknown else ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
            self.epoch, self.last_seq, self.recent = epoch, -1, []
        else:
            for f, lst, base in self.recent:
                if (f, lst) == (first_seq, last):
                    return ErrorCode.NONE, base  # a duplicate: the original offset
            if first_seq != self.last_seq + 1:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        base = len(self.records)
        self.records.extend(values)
        self.last_seq = last
        self.recent = [*self.recent, (first_seq, last, base)][-5:]
        return ErrorCode.NONE, base


FATES = ["ok", "ok", "ok", "lost_request", "lost_answer", "not_leader", "hold_answer"]


@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(["send", "send", "poll", "deliver", "deliver", "answer", "tick"]),
            st.integers(0, 1_000),
            st.sampled_from(FATES),
        ),
        min_size=60,
        max_size=250,
    ),
    delivery_timeout_ms=st.sampled_from([2_000, 10**9]),
)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_interleavings_keep_order_and_never_duplicate(
    steps: list[tuple[str, int, str]], delivery_timeout_ms: int
) -> None:
    core = producer_core(
        LEADERS,
        batch_size=150,
        retry_backoff_ms=10,
        retry_backoff_max_ms=50,
        delivery_timeout_ms=delivery_timeout_ms,
    )
    logs = {tp: PartitionLog() for tp in PARTITIONS}
    sent_order: dict[TopicPartition, list[bytes]] = {tp: [] for tp in PARTITIONS}
    outcomes: dict[bytes, list[tuple[int, BaseException | None]]] = {}
    numbering: dict[tuple[TopicPartition, int, int], bytes] = {}
    wire: list = []  # requests sent, not yet at the broker
    answers: list[tuple[int, dict]] = []  # answers held back (delivered later, in any order)
    now = 0
    counter = 0

    def callback_for(value: bytes):
        def callback(md, err):
            outcomes.setdefault(value, []).append((md.offset, err))

        return callback

    def sent_batches(req) -> dict[TopicPartition, bytes]:
        """The bytes on the wire: the request body, not the batch (which a later epoch bump may renumber)."""
        return {
            TopicPartition(t["name"], p["partition"]): p["records"] for t in req.body["topics"] for p in t["partitions"]
        }

    def poll() -> None:
        for req in core.sender.poll(now).requests:
            for tp, data in sent_batches(req).items():
                decoded = decode_batch(data)
                h = decoded.header
                for i, rec in enumerate(decoded.records):
                    key = (tp, h.producer_epoch, h.base_sequence + i)
                    assert numbering.setdefault(key, rec.value) == rec.value, f"sequence {key} given twice"
            wire.append(req)

    def deliver(index: int, fate: str) -> None:
        req = wire.pop(index % len(wire))
        if fate == "lost_request":
            core.sender.handle_request_failure(req.request_id, KafkaError("refused", ErrorCode.NETWORK_EXCEPTION), now)
            return
        parts = {}
        for tp, data in sent_batches(req).items():
            if fate == "not_leader":
                parts[tp] = {"error_code": int(ErrorCode.NOT_LEADER_OR_FOLLOWER)}
                continue
            decoded = decode_batch(data)
            h = decoded.header
            code, base = logs[tp].append(h.producer_epoch, h.base_sequence, [r.value for r in decoded.records])
            parts[tp] = {"error_code": int(code), "base_offset": base}
        if fate == "lost_answer":
            core.sender.handle_request_failure(
                req.request_id, KafkaError("timed out", ErrorCode.REQUEST_TIMED_OUT), now
            )
        elif fate == "hold_answer":
            answers.append((req.request_id, produce_answer(parts)))
        else:
            core.sender.handle_response(req.request_id, produce_answer(parts), now)

    for action, number, fate in steps:
        if action == "send" and counter < 40:
            tp = PARTITIONS[number % 2]
            value = b"%d:%04d" % (tp.partition, counter)
            counter += 1
            sent_order[tp].append(value)
            result = core.accumulator.append(tp, now, None, value + b"." * 30, (), callback_for(value), now)
            assert result.appended
        elif action == "poll":
            poll()
        elif action == "deliver" and wire:
            deliver(number, fate)
        elif action == "answer" and answers:
            request_id, body = answers.pop(number % len(answers))
            core.sender.handle_response(request_id, body, now)
        elif action == "tick":
            now += number

    # Calm weather: deliver everything until nothing is left to do.
    for _ in range(10_000):
        if not core.sender.has_pending_work() and not wire and not answers:
            break
        while answers:
            request_id, body = answers.pop(0)
            core.sender.handle_response(request_id, body, now)
        poll()
        while wire:
            deliver(0, "ok")
        now += 60
    else:
        raise AssertionError("the producer never settled")

    for tp in PARTITIONS:
        written = [v.rstrip(b".") for v in logs[tp].records]
        assert len(written) == len(set(written)), f"duplicate in {tp}: {written}"
        order = {v: i for i, v in enumerate(sent_order[tp])}
        assert [order[v] for v in written] == sorted(order[v] for v in written), f"{tp} out of order: {written}"
        for value in sent_order[tp]:
            results = outcomes.get(value, [])
            assert len(results) == 1, f"{value!r} reported {len(results)} times"
            offset, err = results[0]
            if err is None:
                assert value in written, f"{value!r} acknowledged but not written"
                if offset >= 0:
                    assert written[offset] == value, f"{value!r} acknowledged at the wrong offset {offset}"
            else:
                assert delivery_timeout_ms < 10**9, f"{value!r} failed without a delivery timeout: {err}"
        if delivery_timeout_ms >= 10**9:
            assert written == sent_order[tp], "with retries and no deadline every record lands, in order"
