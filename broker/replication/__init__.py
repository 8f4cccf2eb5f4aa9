"""Partition replication decisions (sans-I/O): leader HW and ISR, follower truncation, acks, idempotence.

Design notes: docs/replication.md, section "broker/replication/__init__.py".
"""

from kraftpy.broker.replication.actions import (
    Action,
    AppendAsFollower,
    AppendAsLeader,
    AssignEpochStartOffset,
    CompleteProduce,
    IndexAbortedTxn,
    RebuildProducerState,
    SendAlterPartition,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.delayed_fetch import DelayedFetch, FetchCompletion, FetchPartitionStatus
from kraftpy.broker.replication.epochs import EpochEntry, LeaderEpochCache
from kraftpy.broker.replication.model import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerState,
    EpochEndOffset,
    FetchDecision,
    FetchPartition,
    FetchPartitionResponse,
    LogState,
    PartitionRegistration,
    ProduceRequest,
)
from kraftpy.broker.replication.partition import Partition, Role, predates_log
from kraftpy.broker.replication.producer_state import ProducerStateManager

__all__ = [
    "Action",
    "AlterPartitionRequest",
    "AlterPartitionResponse",
    "AppendAsFollower",
    "AppendAsLeader",
    "AssignEpochStartOffset",
    "BrokerState",
    "CompleteProduce",
    "DelayedFetch",
    "EpochEndOffset",
    "EpochEntry",
    "FetchCompletion",
    "FetchDecision",
    "FetchPartition",
    "FetchPartitionResponse",
    "FetchPartitionStatus",
    "IndexAbortedTxn",
    "LeaderEpochCache",
    "LogState",
    "Partition",
    "PartitionRegistration",
    "ProduceRequest",
    "ProducerStateManager",
    "RebuildProducerState",
    "ReplicationConfig",
    "Role",
    "SendAlterPartition",
    "TruncateFullyAndStartAt",
    "TruncateTo",
    "UpdateHighWatermark",
    "predates_log",
]
