"""Partition replication decisions (sans-I/O): leader HW and ISR, follower truncation, acks, idempotence.

A shell keeps one `Partition` per hosted partition and feeds it events with
the current time; each call returns actions (see actions.py) that the shell
performs on storage and the network, in order. Nothing here reads a clock,
does I/O or draws random numbers. docs/replication.md explains the rules.

Modules, one job each:
  model            input and answer values (registrations, fetch, produce, AlterPartition)
  actions          the actions a shell performs
  config           ReplicationConfig with Kafka's names and defaults
  epochs           leader-epoch cache arithmetic (end_offset_for, assign, truncation)
  replica          the leader's view of one follower (LEO, caught-up time)
  isr              shrink/expand policy and the pending ISR states
  watermark        the high-watermark rule
  delayed_produce  acks=all waiting and its completion rules
  delayed_fetch    long-poll completion rules
  producer_state   idempotent producer state, snapshots, rebuild
  leader           PartitionLeader
  follower         PartitionFollower
  partition        Partition: role changes and routing
"""

from kraftpy.broker.replication.actions import (
    Action,
    AppendAsFollower,
    AppendAsLeader,
    AssignEpochStartOffset,
    CompleteProduce,
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
