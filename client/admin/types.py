"""The values the AdminClient takes and returns, named after Kafka's Admin API classes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.types import TopicPartition


@dataclass(frozen=True)
class NewTopic:
    """A topic to create; -1 lets the controller use its defaults (num_partitions, replication_factor)."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: Mapping[int, Sequence[int]] | None = None  # partition -> broker ids
    configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class OperationResult:
    """The outcome for one item of a batched admin call: `error` is None on success."""

    name: str
    error: KafkaError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class CreateTopicResult(OperationResult):
    topic_id: Any = None
    num_partitions: int = -1
    replication_factor: int = -1


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int | None
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    # KIP-966 (DescribeTopicPartitions): replicas out of the ISR that hold every committed record, and
    # the last leader of an ISR that became empty. Metadata carries neither, so both stay () from it.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


@dataclass(frozen=True)
class TopicDescription:
    name: str
    topic_id: Any
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int | None
    brokers: tuple[BrokerDescription, ...]


@dataclass(frozen=True)
class ConfigResource:
    resource_type: str  # "topic" or "broker"
    name: str

    def __post_init__(self) -> None:
        if self.resource_type not in ("topic", "broker"):
            raise ValueError(f'resource_type must be "topic" or "broker", not {self.resource_type!r}')


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    source: str | None = None
    is_default: bool = False


@dataclass(frozen=True)
class AlterConfigOp:
    """One change of incremental_alter_configs: op "set" (with a value) or "delete" (back to the default)."""

    name: str
    op: str = "set"
    value: str | None = None

    def __post_init__(self) -> None:
        if self.op not in ("set", "delete"):
            raise ValueError(f'op must be "set" or "delete", not {self.op!r}')
        if self.op == "set" and self.value is None:
            raise ValueError(f"setting {self.name!r} needs a value")


@dataclass(frozen=True)
class ReplicaState:
    node_id: int
    log_end_offset: int
    lag: int | None = None
    last_fetch_ms_ago: int | None = None


@dataclass(frozen=True)
class QuorumInfo:
    leader_id: int | None
    epoch: int
    high_watermark: int
    voters: tuple[ReplicaState, ...]
    observers: tuple[ReplicaState, ...]


class AdminOperationError(KafkaError):
    """Some items of a batched admin call failed; `errors` maps each to its KafkaError."""

    def __init__(self, what: str, errors: Mapping[Any, KafkaError]) -> None:
        first = next(iter(errors.values()))
        detail = "; ".join(f"{key}: {err}" for key, err in errors.items())
        super().__init__(f"{what} failed for {len(errors)} item(s): {detail}", first.code)
        self.errors = dict(errors)


# Consumer groups -------------------------------------------------------------


@dataclass(frozen=True)
class ConsumerGroupListing:
    """One group as ListGroups shows it; `state` is Kafka's state name ("Stable", "Empty", ...)."""

    group_id: str
    state: str
    protocol_type: str = "consumer"

    @property
    def is_simple_consumer_group(self) -> bool:
        """A group used only for committed offsets (no member ever joined it): no protocol type."""
        return not self.protocol_type


@dataclass(frozen=True)
class ListConsumerGroupsResult:
    """The groups of every broker that answered, and the error of each that did not (Kafka's valid()/errors())."""

    valid: tuple[ConsumerGroupListing, ...]
    errors: Mapping[int, KafkaError] = field(default_factory=dict)  # broker node id -> why it did not answer

    def all(self) -> tuple[ConsumerGroupListing, ...]:
        """Every group, or AdminOperationError when a broker could not be asked (the list would be partial)."""
        if self.errors:
            raise AdminOperationError("list_consumer_groups", {f"broker {n}": e for n, e in self.errors.items()})
        return self.valid


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[TopicPartition, ...]  # decoded from the consumer protocol; () unless the group is Stable


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """DescribeGroups for one group. A group that does not exist comes back with state "Dead" and no members."""

    group_id: str
    state: str
    protocol_type: str
    partition_assignor: str  # the protocol chosen ("range", ...); "" unless the group is Stable
    members: tuple[MemberDescription, ...]
    coordinator: int | None = None  # the coordinator's node id

    @property
    def is_simple_consumer_group(self) -> bool:
        return not self.protocol_type

    @property
    def exists(self) -> bool:
        return self.state != "Dead"
