"""One transactional id's state as its coordinator holds it (Kafka's TransactionMetadata).

A change is prepared (`pending` set, a TxnLogValue built), appended to `__transaction_state`, and
applied only once the append is durable; while `pending` is set the id answers
CONCURRENT_TRANSACTIONS, so there is one write in flight per transactional id.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kraftpy.broker.txn.records import TxnLogValue, TxnState
from kraftpy.protocol.validate import INT16_MAX

S = TxnState
# Kafka's TransactionState.validPreviousStates.
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}
# Kafka's isProducerEpochExhausted: the last epoch is kept for the fencing bump of an abort.
EPOCH_EXHAUSTED_AT = INT16_MAX - 1
TERMINAL_OR_IDLE = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})

TopicPartitionKey = tuple[str, int]


class IllegalTransition(Exception):
    """A transition Kafka's state machine does not allow: a coordinator bug, never a client's fault."""


def group_partitions(partitions: set[TopicPartitionKey] | frozenset[TopicPartitionKey]) -> dict[str, tuple[int, ...]]:
    out: dict[str, list[int]] = {}
    for topic, partition in partitions:
        out.setdefault(topic, []).append(partition)
    return {topic: tuple(sorted(ps)) for topic, ps in sorted(out.items())}


@dataclass
class TxnMetadata:
    transactional_id: str
    partition: int  # of __transaction_state
    producer_id: int
    producer_epoch: int
    txn_timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[TopicPartitionKey] = field(default_factory=set)
    start_timestamp_ms: int = -1
    last_update_timestamp_ms: int = -1
    previous_producer_id: int = -1
    # The state a write in flight moves to (None: none in flight).
    pending: TxnState | None = None
    # KIP-360: the last InitProducerId that named its producer, as (named id, named epoch, given id,
    # given epoch), so a retry of it whose answer was lost gets the same answer instead of being
    # fenced, while the given ones are still current. In memory only, as Kafka's lastProducerEpoch.
    last_bump: tuple[int, int, int, int] | None = None

    def is_retried_bump(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether InitProducerId(producer_id, producer_epoch) repeats the call that made the current epoch."""
        return self.last_bump == (producer_id, producer_epoch, self.producer_id, self.producer_epoch)

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EPOCH_EXHAUSTED_AT

    def value(
        self,
        state: TxnState,
        now_ms: int,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        partitions: set[TopicPartitionKey] | None = None,
        start_timestamp_ms: int | None = None,
    ) -> TxnLogValue:
        """The record of a move to `state` (checked against Kafka's transitions); nothing changes yet."""
        if self.state not in VALID_PREVIOUS[state]:
            raise IllegalTransition(f"{self.transactional_id}: {self.state.kafka_name} -> {state.kafka_name}")
        return TxnLogValue(
            producer_id=self.producer_id if producer_id is None else producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            partitions=group_partitions(self.partitions if partitions is None else partitions),
            last_update_timestamp_ms=now_ms,
            start_timestamp_ms=self.start_timestamp_ms if start_timestamp_ms is None else start_timestamp_ms,
            # A new producer id (the epoch was exhausted) names the one it replaces, as Kafka's
            # prepareProducerIdRotation does. Only value v1 stores it; we write v0, as Kafka does
            # without transaction version 2, so it lives in memory until a failover.
            previous_producer_id=(
                self.producer_id if producer_id not in (None, self.producer_id) else self.previous_producer_id
            ),
        )

    def apply(self, value: TxnLogValue) -> None:
        """The write of `value` is durable: take it as the current state."""
        self.previous_producer_id = value.previous_producer_id
        self.producer_id = value.producer_id
        self.producer_epoch = value.producer_epoch
        self.txn_timeout_ms = value.txn_timeout_ms
        self.state = value.state
        self.partitions = {(t, p) for t, ps in value.partitions.items() for p in ps}
        self.start_timestamp_ms = value.start_timestamp_ms
        self.last_update_timestamp_ms = value.last_update_timestamp_ms
        self.pending = None

    @classmethod
    def from_value(cls, transactional_id: str, partition: int, value: TxnLogValue) -> TxnMetadata:
        meta = cls(transactional_id, partition, value.producer_id, value.producer_epoch, value.txn_timeout_ms)
        meta.apply(value)
        return meta
