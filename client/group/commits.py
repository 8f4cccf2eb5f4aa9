"""Committed offsets on the client: the values, the pending operations, and the OffsetCommit/OffsetFetch shapes.

A commit or an offset lookup is a `GroupOperation` the shell can wait on
(`done`, `error`, `result`). A synchronous commit or a lookup retries
retriable failures until its deadline; an asynchronous commit is tried once
(as Kafka's commitAsync) and reports through its callback.

How the answer's per-partition errors are classified follows Kafka's
OffsetCommitResponseHandler: coordinator errors are retriable (and make the
member look for the coordinator again), REBALANCE_IN_PROGRESS asks the
application to poll and retry, UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION mean the
member lost its generation (CommitFailedError), anything else is final.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.errors import error_from, malformed
from kraftpy.client.group.errors import CommitFailedError, FencedInstanceIdError, RebalanceInProgressError
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

E = ErrorCode
# Errors after which the coordinator must be looked up again (Kafka's markCoordinatorUnknown cases).
COORDINATOR_ERRORS = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR, E.REQUEST_TIMED_OUT})
RETRIABLE_COMMIT_ERRORS = COORDINATOR_ERRORS | {E.COORDINATOR_LOAD_IN_PROGRESS, E.UNKNOWN_TOPIC_OR_PARTITION}
GENERATION_ERRORS = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION})


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """What a consumer commits for a partition: the next offset to read, and the epoch of the record before it."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"a committed offset must not be negative, got {self.offset}")


CommitCallback = Callable[[Mapping[TopicPartition, OffsetAndMetadata], KafkaError | None], Any]
_ids = itertools.count(1)


@dataclass(eq=False)
class GroupOperation:
    """A commit or a committed-offsets lookup in progress; the shell waits until `done`."""

    kind: str  # "commit" or "fetch"
    offsets: dict[TopicPartition, OffsetAndMetadata] = field(default_factory=dict)  # what a commit commits
    partitions: tuple[TopicPartition, ...] = ()  # what a lookup asks for
    deadline_ms: int | None = None  # None: one attempt only (commit_async)
    callback: CommitCallback | None = None
    done: bool = False
    error: KafkaError | None = None
    result: dict[TopicPartition, OffsetAndMetadata | None] = field(default_factory=dict)
    retry_at_ms: int = 0
    in_flight: int | None = None  # the request id carrying it now
    internal: bool = False  # auto-commits and the commit before a rebalance: not the application's
    op_id: int = field(default_factory=lambda: next(_ids))

    def finish(self, error: KafkaError | None = None) -> None:
        self.done = True
        self.error = error
        self.in_flight = None

    @property
    def retries(self) -> bool:
        return self.deadline_ms is not None


def commit_body(
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    offsets: Mapping[TopicPartition, OffsetAndMetadata],
) -> dict[str, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, om in sorted(offsets.items()):
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": om.offset,
                "committed_leader_epoch": -1 if om.leader_epoch is None else om.leader_epoch,
                "committed_metadata": om.metadata,
            }
        )
    return {
        "group_id": group_id,
        "generation_id": generation_id,
        "member_id": member_id,
        "group_instance_id": group_instance_id,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def fetch_body(group_id: str, partitions: tuple[TopicPartition, ...], require_stable: bool = False) -> dict[str, Any]:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    body: dict[str, Any] = {
        "group_id": group_id,
        "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
    }
    if require_stable:
        body["require_stable"] = True
    return body


def _partition_rows(body: Mapping[str, Any], what: str) -> list[tuple[TopicPartition, Mapping[str, Any]]]:
    rows = []
    topics = body.get("topics") or []
    if not isinstance(topics, list):
        raise malformed(what, "topics")
    for topic in topics:
        if not isinstance(topic, Mapping) or not isinstance(topic.get("name"), str):
            raise malformed(what, "topic entry")
        for part in topic.get("partitions") or []:
            if not isinstance(part, Mapping) or type(part.get("partition_index")) is not int:
                raise malformed(what, "partition entry")
            rows.append((TopicPartition(topic["name"], part["partition_index"]), part))
    return rows


@dataclass(frozen=True, slots=True)
class CommitOutcome:
    """What one OffsetCommit answer means for the member and the operation."""

    error: KafkaError | None  # None: committed
    retriable: bool = False
    coordinator_unknown: bool = False
    generation_lost: bool = False
    fenced: bool = False


def classify_commit_error(code: ErrorCode, message: str) -> CommitOutcome:
    if code is E.NONE:
        return CommitOutcome(None)
    if code in RETRIABLE_COMMIT_ERRORS:
        return CommitOutcome(error_from(code, message), retriable=True, coordinator_unknown=code in COORDINATOR_ERRORS)
    if code is E.FENCED_INSTANCE_ID:
        return CommitOutcome(FencedInstanceIdError(message or "this group_instance_id was taken over"), fenced=True)
    if code is E.REBALANCE_IN_PROGRESS:
        return CommitOutcome(
            RebalanceInProgressError(
                "Offset commit cannot be completed since the consumer is undergoing a rebalance; "
                "call poll() to complete the rebalance, then retry"
            )
        )
    if code in GENERATION_ERRORS:
        return CommitOutcome(CommitFailedError(code=code), generation_lost=True)
    return CommitOutcome(error_from(code, message))


def parse_commit(body: Mapping[str, Any]) -> CommitOutcome:
    """The most severe per-partition outcome decides (any failure fails the whole commit, as Kafka)."""
    top = body.get("error_code", 0)
    if type(top) is not int:
        raise malformed("offset_commit", "error_code")
    if top:
        return classify_commit_error(error_from(top).code, str(body.get("message") or ""))
    worst: CommitOutcome | None = None
    for _, part in _partition_rows(body, "offset_commit"):
        code = part.get("error_code", 0)
        if type(code) is not int:
            raise malformed("offset_commit", "error_code")
        if code:
            outcome = classify_commit_error(error_from(code).code, str(part.get("message") or ""))
            # Prefer a non-retriable reason: retrying cannot fix it.
            if worst is None or (worst.retriable and not outcome.retriable):
                worst = outcome
    return worst or CommitOutcome(None)


def parse_fetch(
    body: Mapping[str, Any], wanted: tuple[TopicPartition, ...]
) -> tuple[ErrorCode, str, dict[TopicPartition, OffsetAndMetadata | None]]:
    """OffsetFetch: the top-level error (or the first partition error) and each partition's committed offset."""
    top = body.get("error_code", 0)
    if type(top) is not int:
        raise malformed("offset_fetch", "error_code")
    if top:
        err = error_from(top, str(body.get("message") or ""))
        return err.code, err.message, {}
    out: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(wanted)
    for tp, part in _partition_rows(body, "offset_fetch"):
        code = part.get("error_code", 0)
        if code:
            err = error_from(code if type(code) is int else -1, str(part.get("message") or ""))
            return err.code, f"{tp}: {err.message}", {}
        offset = part.get("committed_offset", -1)
        if type(offset) is not int:
            raise malformed("offset_fetch", "committed_offset")
        if offset >= 0:
            epoch = part.get("committed_leader_epoch", -1)
            metadata = part.get("metadata") or ""
            out[tp] = OffsetAndMetadata(
                offset,
                metadata if isinstance(metadata, str) else "",
                epoch if type(epoch) is int and epoch >= 0 else None,
            )
    return E.NONE, "", out
