"""The admin client's transaction calls (sans-I/O): bodies and parsed answers, as Kafka's Admin API.

`list_transactions` asks every broker (each knows only the transactional ids
it coordinates) and merges, as Kafka's ListTransactions; `describe_transactions`
asks the coordinator of each id (FindCoordinator key_type 1). States and
fields are Kafka's (kafka-transactions.sh prints the same columns).
Docs: docs/transactions.md, section "The client".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kraftpy.client.errors import error_from, malformed
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

LIST_TRANSACTIONS_PATH = "/kafka/list_transactions"
DESCRIBE_TRANSACTIONS_PATH = "/kafka/describe_transactions"
TRANSACTION_KEY_TYPE = 1
# Kafka's TransactionState names, as ListTransactions filters and answers them.
TRANSACTION_STATES = (
    "Empty",
    "Ongoing",
    "PrepareCommit",
    "PrepareAbort",
    "CompleteCommit",
    "CompleteAbort",
    "PrepareEpochFence",
    "Dead",
)


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str
    coordinator_id: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None  # None: no transaction open (Kafka's -1)
    topic_partitions: tuple[TopicPartition, ...]


def list_transactions_body(
    states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None, duration_filter_ms: int = -1
) -> dict[str, Any]:
    return {
        "state_filters": list(states or ()),
        "producer_id_filters": list(producer_ids or ()),
        "duration_filter": duration_filter_ms,
    }


def parse_list_transactions(body: Mapping[str, Any], coordinator_id: int) -> list[TransactionListing]:
    code = body.get("error_code", 0)
    if code:
        raise error_from(code, str(body.get("message") or ""))
    out = []
    for item in body.get("transaction_states") or []:
        if not isinstance(item, Mapping) or not isinstance(item.get("transactional_id"), str):
            raise malformed("list_transactions", "transaction_states")
        producer_id = item.get("producer_id", -1)
        if type(producer_id) is not int:
            raise malformed("list_transactions", "producer_id")
        out.append(
            TransactionListing(
                item["transactional_id"], producer_id, str(item.get("transaction_state")), coordinator_id
            )
        )
    return out


def merge_listings(per_broker: Iterable[list[TransactionListing]]) -> list[TransactionListing]:
    """One row per transactional id (a coordinator that just moved may be asked twice), sorted by id."""
    merged: dict[str, TransactionListing] = {}
    for listings in per_broker:
        for listing in listings:
            merged.setdefault(listing.transactional_id, listing)
    return [merged[k] for k in sorted(merged)]


def parse_describe_transaction(
    body: Mapping[str, Any], transactional_id: str, coordinator_id: int
) -> TransactionDescription | KafkaError:
    """The one id's description, or its error (TRANSACTIONAL_ID_NOT_FOUND for an id the coordinator lacks)."""
    try:
        return _describe(body, transactional_id, coordinator_id)
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        return malformed("describe_transactions", repr(exc))


def _describe(
    body: Mapping[str, Any], transactional_id: str, coordinator_id: int
) -> TransactionDescription | KafkaError:
    for item in body.get("transaction_states") or []:
        if not isinstance(item, Mapping) or item.get("transactional_id") != transactional_id:
            continue
        code = item.get("error_code", 0)
        if code:
            error = error_from(code, str(item.get("message") or ""))
            return KafkaError(f"transactional id {transactional_id!r}: {error.message}", error.code)
        start = int(item.get("transaction_start_time_ms", -1))
        partitions = tuple(
            sorted(
                TopicPartition(t["topic"], int(p)) for t in item.get("topics") or [] for p in t.get("partitions") or []
            )
        )
        return TransactionDescription(
            transactional_id,
            coordinator_id,
            str(item.get("transaction_state")),
            int(item.get("producer_id", -1)),
            int(item.get("producer_epoch", -1)),
            int(item.get("transaction_timeout_ms", -1)),
            None if start < 0 else start,
            partitions,
        )
    return KafkaError(f"no answer for transactional id {transactional_id!r}", ErrorCode.CORRUPT_MESSAGE)
