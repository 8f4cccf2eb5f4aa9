"""KIP-890 part 1 on one partition: which producers the transaction coordinator has vouched for.

A transactional batch from a producer with no open transaction here may only be appended once the
coordinator confirmed that this partition is in the producer's ongoing transaction (a raw write,
or a late retry landing after the marker, would otherwise open a transaction the coordinator never
ends, so the LSO hangs, or join the next one). The shell asks the coordinator; this object only
remembers, per producer id, the epoch being verified and a guard: a marker written meanwhile
clears the entry, so an answer that arrives after it (Kafka's ABA case: verified, marker, stale
answer) no longer counts. A verified entry lasts until the producer's next marker. Pure: no I/O,
the clock comes in as `now_ms`. Docs: docs/transactions.md, "Verification (KIP-890 part 1)".
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError


@dataclass(slots=True)
class _Verification:
    producer_epoch: int
    guard: int
    verified: bool
    started_ms: int


class TxnVerifications:
    def __init__(self) -> None:
        self._entries: dict[int, _Verification] = {}
        self._last_guard = 0

    def __len__(self) -> int:
        return len(self._entries)

    def is_verified(self, producer_id: int, producer_epoch: int) -> bool:
        entry = self._entries.get(producer_id)
        return entry is not None and entry.verified and entry.producer_epoch == producer_epoch

    def start(self, producer_id: int, producer_epoch: int, now_ms: int) -> int:
        """The guard of a verification of (producer, epoch): a new one unless one is already under way."""
        entry = self._entries.get(producer_id)
        if entry is not None and entry.producer_epoch == producer_epoch and not entry.verified:
            return entry.guard
        self._last_guard += 1
        self._entries[producer_id] = _Verification(producer_epoch, self._last_guard, False, now_ms)
        return self._last_guard

    def complete(self, producer_id: int, producer_epoch: int, guard: int) -> bool:
        """The coordinator said yes: the producer is verified here, unless a marker came in between."""
        entry = self._entries.get(producer_id)
        if entry is None or entry.guard != guard or entry.producer_epoch != producer_epoch:
            return False
        entry.verified = True
        return True

    def clear(self, producer_id: int) -> None:
        """A marker ended the producer's transaction here: its next transaction is verified again."""
        self._entries.pop(producer_id, None)

    def remove_expired(self, now_ms: int, expiration_ms: int) -> None:
        """Forget entries older than producer_id_expiration_ms (as Kafka's verification state entries)."""
        old = [pid for pid, e in self._entries.items() if now_ms - e.started_ms >= expiration_ms]
        for pid in old:
            del self._entries[pid]


# Coordinator answers a client may not retry correctly on a produce: Kafka answers NOT_ENOUGH_REPLICAS
# instead (retriable everywhere, and no metadata refresh).
_RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


def produce_error(coordinator_error: ErrorCode, message: str = "") -> KafkaError | None:
    """The produce answer for a partition the coordinator did not verify (Kafka's ReplicaManager), or None."""
    if coordinator_error == ErrorCode.NONE:
        return None
    if coordinator_error == ErrorCode.INVALID_TXN_STATE:
        return KafkaError("Partition was not added to the transaction", ErrorCode.INVALID_TXN_STATE)
    if coordinator_error in _RETRIABLE_COORDINATOR_ERRORS:
        detail = f": {message}" if message else ""
        return KafkaError(
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {coordinator_error.name}{detail}",
            ErrorCode.NOT_ENOUGH_REPLICAS,
        )
    return KafkaError(message or f"transaction verification failed: {coordinator_error.name}", coordinator_error)
