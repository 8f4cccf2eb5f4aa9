"""The controller's requests and responses (plain data; the transport encodes them).

Shapes follow Kafka's APIs: batched requests answered item by item, each item
with `error: KafkaError | None`. A whole-request failure (NOT_CONTROLLER,
STALE_BROKER_EPOCH on a heartbeat, ...) is answered with a bare KafkaError
instead of the response type.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.metadata.configs import ConfigResourceType, ConfigSource
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import KafkaError

# --- brokers -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BrokerRegistrationRequest:
    broker_id: int
    cluster_id: str
    incarnation_id: str
    listeners: tuple[Listener, ...] = ()
    rack: str | None = None
    # Kafka's PreviousBrokerEpoch (KIP-966): the epoch of this broker's last registration when its
    # logs hold everything it acknowledged (a clean shutdown, or no reboot since: broker/clean_restart.py);
    # -1 otherwise. Any other value makes the controller treat the restart as unclean.
    previous_broker_epoch: int = -1


@dataclass(frozen=True, slots=True)
class BrokerRegistrationResponse:
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatRequest:
    broker_id: int
    broker_epoch: int
    current_metadata_offset: int
    want_shutdown: bool = False
    # (topic id, partition) of replicas this broker cannot serve (a corrupt batch, a failed disk):
    # per partition what Kafka's heartbeat says per log directory (offlineLogDirs, KIP-858).
    offline_replicas: tuple[tuple[uuid.UUID, int], ...] = ()


@dataclass(frozen=True, slots=True)
class BrokerHeartbeatResponse:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


@dataclass(frozen=True, slots=True)
class UnregisterBrokerRequest:
    broker_id: int


@dataclass(frozen=True, slots=True)
class UnregisterBrokerResponse:
    pass


# --- topics ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CreatableTopic:
    """-1 for num_partitions / replication_factor means the controller's default (Kafka's convention).

    `assignments[i]` is the replica list of partition i (then both counts must be -1).
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    assignments: tuple[tuple[int, ...], ...] | None = None
    configs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreateTopicsRequest:
    topics: tuple[CreatableTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreateTopicResult:
    name: str
    error: KafkaError | None = None
    topic_id: uuid.UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, Any] = field(default_factory=dict)  # the overrides it was created with


@dataclass(frozen=True, slots=True)
class CreateTopicsResponse:
    results: tuple[CreateTopicResult, ...]


@dataclass(frozen=True, slots=True)
class DeleteTopicsRequest:
    names: tuple[str, ...] = ()
    topic_ids: tuple[uuid.UUID, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteTopicResult:
    name: str | None
    topic_id: uuid.UUID | None
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class DeleteTopicsResponse:
    results: tuple[DeleteTopicResult, ...]


@dataclass(frozen=True, slots=True)
class CreatePartitionsTopic:
    """Grow topic `name` to `count` partitions; `assignments` lists the new partitions' replicas."""

    name: str
    count: int
    assignments: tuple[tuple[int, ...], ...] | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    topics: tuple[CreatePartitionsTopic, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class CreatePartitionsResult:
    name: str
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    results: tuple[CreatePartitionsResult, ...]


# --- configs -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConfigResource:
    type: ConfigResourceType
    name: str  # topic name; broker id as text, or "" for the cluster-wide broker default


class AlterConfigOpType(enum.IntEnum):
    """Kafka's IncrementalAlterConfigs operation numbers."""

    SET = 0
    DELETE = 1


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    key: str
    op: AlterConfigOpType = AlterConfigOpType.SET
    value: Any = None


@dataclass(frozen=True, slots=True)
class AlterConfigsResource:
    resource: ConfigResource
    ops: tuple[AlterConfigOp, ...]


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsRequest:
    resources: tuple[AlterConfigsResource, ...]
    validate_only: bool = False


@dataclass(frozen=True, slots=True)
class AlterConfigsResult:
    resource: ConfigResource
    error: KafkaError | None = None


@dataclass(frozen=True, slots=True)
class IncrementalAlterConfigsResponse:
    results: tuple[AlterConfigsResult, ...]


@dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    resources: tuple[ConfigResource, ...]
    keys: tuple[str, ...] | None = None  # None = every config


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: Any
    source: ConfigSource
    is_default: bool
    type: str
    doc: str


@dataclass(frozen=True, slots=True)
class DescribeConfigsResult:
    resource: ConfigResource
    error: KafkaError | None = None
    entries: tuple[ConfigEntry, ...] = ()


@dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    results: tuple[DescribeConfigsResult, ...]


# --- partitions ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AlterPartitionItem:
    """The leader's proposed ISR, stamped with the leader and partition epochs it knows."""

    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    new_isr: tuple[int, ...]
    partition_epoch: int


@dataclass(frozen=True, slots=True)
class AlterPartitionRequest:
    broker_id: int
    broker_epoch: int
    partitions: tuple[AlterPartitionItem, ...]


@dataclass(frozen=True, slots=True)
class AlterPartitionItemResult:
    topic_id: uuid.UUID
    partition: int
    error: KafkaError | None = None
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


@dataclass(frozen=True, slots=True)
class AlterPartitionResponse:
    results: tuple[AlterPartitionItemResult, ...]


class ElectionType(enum.IntEnum):
    """Kafka's ElectLeaders election types."""

    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ElectLeadersRequest:
    election_type: ElectionType
    partitions: tuple[tuple[str, int], ...] | None = None  # (topic, partition); None = every partition


@dataclass(frozen=True, slots=True)
class ElectLeadersResult:
    topic: str
    partition: int
    error: KafkaError | None = None
    leader: int = -1


@dataclass(frozen=True, slots=True)
class ElectLeadersResponse:
    results: tuple[ElectLeadersResult, ...]


# --- producer ids --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsRequest:
    broker_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class AllocateProducerIdsResponse:
    producer_id_start: int
    producer_id_len: int


# --- the linearizable registers (register_control.py) ----------------------------------------------


@dataclass(frozen=True, slots=True)
class RegisterWriteRequest:
    key: str
    value: int
    cas: bool = False  # only while the register holds `expected`
    expected: int | None = None  # None: never written


@dataclass(frozen=True, slots=True)
class RegisterWriteResponse:
    previous: int | None


# --- every decision's output -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ControllerResult:
    """Records to commit (as one atomic batch) and the response to send once they are committed.

    The response of a result without records may still depend on records the
    controller produced earlier and that are not committed yet, so it too waits
    until everything appended before it commits (see deferred.py).
    """

    records: tuple[Any, ...] = ()
    response: Any = None
    # The image after `records`, when the decision already built it (saves applying them again).
    image: Any = field(default=None, compare=False, repr=False)

    @property
    def error(self) -> KafkaError | None:
        return self.response if isinstance(self.response, KafkaError) else None
