"""Exceptions of consumer groups, with Kafka's names (CommitFailedException, RebalanceInProgressException, ...)."""

from __future__ import annotations

from kraftpy.protocol.errors import ErrorCode, KafkaError

# What the client says of a commit it refuses without sending it, the member being out of a stable generation
# (Kafka's generationIfStable): no coordinator ever sees such a commit.
COMMIT_REFUSED_REBALANCING = (
    "Offset commit cannot be completed since the consumer is undergoing a rebalance; call poll() to complete it, "
    "then retry"
)
COMMIT_REFUSED_NOT_IN_GROUP = (
    "Offset commit cannot be completed since the consumer is not part of an active group; it was likely kicked "
    "out of the group"
)
LOCAL_COMMIT_REFUSALS = frozenset({COMMIT_REFUSED_REBALANCING, COMMIT_REFUSED_NOT_IN_GROUP})


class CommitFailedError(KafkaError):
    """The commit cannot succeed: this consumer is no longer part of the group's current generation."""

    code = ErrorCode.ILLEGAL_GENERATION

    def __init__(self, message: str = "", code: ErrorCode | None = None) -> None:
        super().__init__(
            message
            or "Commit cannot be completed since the group has already rebalanced and assigned the partitions to "
            "another member. This means that the time between subsequent calls to poll() was longer than the "
            "configured max_poll_interval_ms, which typically implies that the poll loop is spending too much "
            "time processing messages. You can address this either by increasing max_poll_interval_ms or by "
            "reducing the maximum size of batches returned in poll() with max_poll_records.",
            code,
        )


class RebalanceInProgressError(KafkaError):
    """The group is rebalancing: call poll() to finish the rebalance, then retry the operation."""

    code = ErrorCode.REBALANCE_IN_PROGRESS


class RetriableCommitFailedError(KafkaError):
    """An asynchronous commit failed for a reason that may pass (coordinator moved, timed out, ...)."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


class FencedInstanceIdError(KafkaError):
    """Another consumer took over this group_instance_id: this one is fenced and must be closed."""

    code = ErrorCode.FENCED_INSTANCE_ID


class GroupProtocolError(KafkaError):
    """A fatal group error (inconsistent protocol, invalid session timeout, group full, ...) for the application."""


class InvalidGroupIdError(KafkaError):
    """A group API (subscribe, commit, committed) was used by a consumer configured without a group_id."""

    code = ErrorCode.INVALID_GROUP_ID

    def __init__(self, message: str = "") -> None:
        super().__init__(
            message or "To use the group management or offset commit APIs, you must provide a valid group_id"
        )
