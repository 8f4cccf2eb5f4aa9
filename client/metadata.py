"""The client's view of the cluster (sans-I/O), as Kafka's Metadata and Cluster classes.

Design notes: docs/client.md, section "client/metadata.py".
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kraftpy.client.errors import error_from
from kraftpy.protocol.backoff import Backoff
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.types import TopicPartition

Address = tuple[str, int]
NO_LEADER = -1


@dataclass(frozen=True, slots=True)
class BrokerNode:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    @property
    def address(self) -> Address:
        return (self.host, self.port)


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    topic: str
    partition: int
    leader_id: int
    leader_epoch: int
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    error: ErrorCode = ErrorCode.NONE

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @property
    def has_leader(self) -> bool:
        return self.leader_id != NO_LEADER and self.leader_id is not None


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """A partition's leader node id and leader epoch, either unknown (None)."""

    leader: int | None
    epoch: int | None

    @classmethod
    def no_leader(cls) -> LeaderAndEpoch:
        return cls(None, None)


@dataclass(frozen=True)
class Cluster:
    """One immutable metadata snapshot."""

    cluster_id: str | None = None
    controller_id: int | None = None
    brokers: Mapping[int, BrokerNode] = field(default_factory=dict)
    partitions: Mapping[TopicPartition, PartitionInfo] = field(default_factory=dict)
    topic_errors: Mapping[str, ErrorCode] = field(default_factory=dict)
    topic_ids: Mapping[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def _by_topic(self) -> dict[str, tuple[list[PartitionInfo], list[int]]]:
        """topic -> (its partitions in order, the ones with a known leader), built once per snapshot.

        send() asks for a topic's partitions on every record; a scan of every partition each time
        was most of the producer's per-record cost.
        """
        grouped: dict[str, list[PartitionInfo]] = {}
        for tp, info in self.partitions.items():
            grouped.setdefault(tp.topic, []).append(info)
        out = {}
        for topic, infos in grouped.items():
            infos.sort(key=lambda p: p.partition)
            out[topic] = (infos, [p.partition for p in infos if self.leader_for(p.topic_partition)])
        return out

    @property
    def topics(self) -> set[str]:
        return set(self._by_topic)

    def partitions_for_topic(self, topic: str) -> list[PartitionInfo]:
        found = self._by_topic.get(topic)
        return list(found[0]) if found is not None else []

    def num_partitions(self, topic: str) -> int | None:
        found = self._by_topic.get(topic)
        return len(found[0]) if found is not None else None

    def available_partitions(self, topic: str) -> list[int]:
        """Partitions with a leader that is a known broker, the ones a producer can send to now."""
        found = self._by_topic.get(topic)
        return found[1] if found is not None else []

    def partition(self, tp: TopicPartition) -> PartitionInfo | None:
        return self.partitions.get(tp)

    def leader_for(self, tp: TopicPartition) -> BrokerNode | None:
        info = self.partitions.get(tp)
        if info is None or not info.has_leader:
            return None
        return self.brokers.get(info.leader_id)

    def leader_and_epoch(self, tp: TopicPartition) -> LeaderAndEpoch:
        info = self.partitions.get(tp)
        if info is None:
            return LeaderAndEpoch.no_leader()
        leader = info.leader_id if info.has_leader and info.leader_id in self.brokers else None
        return LeaderAndEpoch(leader, info.leader_epoch if info.leader_epoch >= 0 else None)

    def node(self, node_id: int) -> BrokerNode | None:
        return self.brokers.get(node_id)

    def controller(self) -> BrokerNode | None:
        return None if self.controller_id is None else self.brokers.get(self.controller_id)


def _field(body: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = body.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise KafkaError(f"metadata answer: {where}.{key} is {value!r}", ErrorCode.CORRUPT_MESSAGE)
    return value


def parse_metadata_response(body: Mapping[str, Any]) -> Cluster:
    """Build a Cluster from a `/kafka/metadata` answer; a malformed answer raises CORRUPT_MESSAGE."""
    brokers: dict[int, BrokerNode] = {}
    for i, b in enumerate(_field(body, "brokers", list, "answer")):
        where = f"brokers[{i}]"
        if not isinstance(b, Mapping):
            raise KafkaError(f"metadata answer: {where} is not a map", ErrorCode.CORRUPT_MESSAGE)
        node_id = _field(b, "node_id", int, where)
        host, port = _field(b, "host", str, where), _field(b, "port", int, where)
        brokers[node_id] = BrokerNode(node_id, host, port, b.get("rack"))
    partitions: dict[TopicPartition, PartitionInfo] = {}
    topic_errors: dict[str, ErrorCode] = {}
    topic_ids: dict[str, Any] = {}
    for i, t in enumerate(_field(body, "topics", list, "answer")):
        where = f"topics[{i}]"
        if not isinstance(t, Mapping):
            raise KafkaError(f"metadata answer: {where} is not a map", ErrorCode.CORRUPT_MESSAGE)
        name = _field(t, "name", str, where)
        error = error_from(t.get("error_code", 0)).code
        topic_ids[name] = t.get("topic_id")
        if error != ErrorCode.NONE:
            topic_errors[name] = error
            continue
        for j, p in enumerate(t.get("partitions") or []):
            pwhere = f"{where}.partitions[{j}]"
            index = _field(p, "partition", int, pwhere)
            leader = p.get("leader_id")
            epoch = p.get("leader_epoch")
            partitions[TopicPartition(name, index)] = PartitionInfo(
                topic=name,
                partition=index,
                leader_id=leader if isinstance(leader, int) else NO_LEADER,
                leader_epoch=epoch if isinstance(epoch, int) else -1,
                replicas=tuple(p.get("replica_nodes") or ()),
                isr=tuple(p.get("isr_nodes") or ()),
                error=error_from(p.get("error_code", 0)).code,
            )
    controller = body.get("controller_id")
    return Cluster(
        cluster_id=body.get("cluster_id"),
        controller_id=controller if isinstance(controller, int) and controller >= 0 else None,
        brokers=brokers,
        partitions=partitions,
        topic_errors=topic_errors,
        topic_ids=topic_ids,
    )


# After a request to a broker failed without an answer, metadata is refreshed (at the refresh backoff) for
# this long while that broker still leads something, so a leader change is seen soon after the controller makes it.
UNREACHABLE_LEADER_WATCH_MS = 30_000


class Metadata:
    """The current Cluster plus the rules for refreshing it. Time is passed in as `now_ms`."""

    def __init__(
        self,
        bootstrap: Iterable[Address],
        *,
        metadata_max_age_ms: int = 300_000,
        refresh_backoff_ms: int = 100,
        refresh_backoff_max_ms: int = 1_000,
        all_topics: bool = False,
        rng: random.Random | None = None,
    ) -> None:
        self.bootstrap: list[Address] = list(bootstrap)
        if not self.bootstrap:
            raise ValueError("metadata needs at least one bootstrap server")
        self.metadata_max_age_ms = metadata_max_age_ms
        self._backoff = Backoff(refresh_backoff_ms, refresh_backoff_max_ms, rng=rng or random.Random())
        self._backoff_ms = 0.0
        self.all_topics = all_topics
        self.cluster = Cluster()
        self.update_version = 0
        self.last_refresh_ms: int | None = None
        self.last_successful_refresh_ms: int | None = None
        self._need_update = True  # nothing is known before the first answer
        self._topics: dict[str, int | None] = {}  # topic -> expiry ms (None: kept until removed)
        self._last_seen_epochs: dict[TopicPartition, int] = {}
        self._failed_at: dict[Address, int] = {}
        self._fatal: KafkaError | None = None

    # Which topics to ask about -------------------------------------------------

    def add_topic(self, topic: str, expires_at_ms: int | None = None) -> None:
        """Track `topic`; a topic not in the snapshot yet triggers a refresh."""
        if topic not in self._topics:
            self._topics[topic] = expires_at_ms
            if topic not in self.cluster.topics:
                self._need_update = True
        elif expires_at_ms is not None and self._topics[topic] is not None:
            self._topics[topic] = max(expires_at_ms, self._topics[topic] or 0)

    def set_topics(self, topics: Iterable[str]) -> None:
        wanted = set(topics)
        if wanted - set(self._topics) - self.cluster.topics:
            self._need_update = True
        self._topics = dict.fromkeys(wanted)

    def expire_topics(self, now_ms: int) -> list[str]:
        """Forget topics whose expiry passed (the producer drops topics it stopped sending to)."""
        gone = [t for t, exp in self._topics.items() if exp is not None and exp <= now_ms]
        for topic in gone:
            del self._topics[topic]
        return gone

    @property
    def topics(self) -> list[str]:
        return sorted(self._topics)

    def request_body(self) -> dict[str, Any]:
        return {"topics": None if self.all_topics else self.topics}

    # When to refresh ---------------------------------------------------------

    def request_update(self) -> int:
        """Ask for a refresh as soon as the backoff allows; returns the version to wait past."""
        self._need_update = True
        return self.update_version

    @property
    def update_requested(self) -> bool:
        return self._need_update

    def time_to_next_update(self, now_ms: int) -> float:
        """Ms until a refresh is due: 0 when one is needed and the backoff has passed."""
        if self._need_update or self.last_successful_refresh_ms is None:
            expire = 0.0
        else:
            expire = max(0.0, self.last_successful_refresh_ms + self.metadata_max_age_ms - now_ms)
        allow = 0.0 if self.last_refresh_ms is None else max(0.0, self.last_refresh_ms + self._backoff_ms - now_ms)
        return max(expire, allow)

    # Applying answers --------------------------------------------------------

    def update(self, body: Mapping[str, Any], now_ms: int) -> Cluster:
        """Apply a metadata answer. Partitions whose leader epoch went backwards keep the newer entry."""
        fresh = parse_metadata_response(body)
        partitions = dict(fresh.partitions)
        for tp, info in fresh.partitions.items():
            seen = self._last_seen_epochs.get(tp)
            if seen is not None and 0 <= info.leader_epoch < seen:
                old = self.cluster.partitions.get(tp)
                # A stale broker answered: keep what we knew, or at least do not trust its leader.
                partitions[tp] = old if old is not None else PartitionInfo(tp.topic, tp.partition, NO_LEADER, -1)
                continue
            if info.leader_epoch >= 0:
                self._last_seen_epochs[tp] = max(seen if seen is not None else -1, info.leader_epoch)
        if not self.all_topics:
            # Keep only what was asked for, so topics answered for someone else do not linger.
            wanted = set(self._topics)
            partitions = {tp: p for tp, p in partitions.items() if tp.topic in wanted}
        self.cluster = Cluster(
            cluster_id=fresh.cluster_id,
            controller_id=fresh.controller_id,
            brokers=fresh.brokers,
            partitions=partitions,
            topic_errors=fresh.topic_errors,
            topic_ids=fresh.topic_ids,
        )
        self.update_version += 1
        self.last_refresh_ms = now_ms
        self.last_successful_refresh_ms = now_ms
        self._backoff.reset()
        # Even after a success, refreshes are spaced by the base backoff so that a
        # leaderless partition does not make us ask in a tight loop.
        self._backoff_ms = self._backoff.initial_ms
        # Topics still missing (just created: brokers learn of a topic a moment after the controller
        # commits it; Kafka retries UNKNOWN_TOPIC_OR_PARTITION as any invalid metadata), partitions still
        # leaderless, or led by a broker we just failed to reach (it may have died; the controller will
        # move its leaderships within a session timeout): look again after the backoff, so a new topic
        # or leader is known within one backoff of its creation or election.
        missing = not self.all_topics and any(t not in self.cluster.topics for t in self._topics)
        self._need_update = (
            missing or any(not self.cluster.leader_for(tp) for tp in partitions) or self._leader_unreachable(now_ms)
        )
        return self.cluster

    def _leader_unreachable(self, now_ms: int) -> bool:
        if not self._failed_at:
            return False
        horizon = now_ms - UNREACHABLE_LEADER_WATCH_MS
        failed = {a for a, at in self._failed_at.items() if at >= horizon}
        if not failed:
            return False
        leaders = {info.leader_id for info in self.cluster.partitions.values() if info.has_leader}
        return any(b.address in failed for node_id, b in self.cluster.brokers.items() if node_id in leaders)

    def failed_update(self, now_ms: int) -> None:
        """Every candidate failed: back off exponentially before the next attempt."""
        self.last_refresh_ms = now_ms
        self._backoff_ms = self._backoff.next_ms()

    def update_last_seen_epoch_if_newer(self, tp: TopicPartition, epoch: int) -> bool:
        """A fetched batch or an answer carried `epoch`; a newer one than we know means our metadata is old."""
        seen = self._last_seen_epochs.get(tp)
        if epoch >= 0 and (seen is None or epoch > seen):
            self._last_seen_epochs[tp] = epoch
            self._need_update = True
            return True
        return False

    def last_seen_epoch(self, tp: TopicPartition) -> int | None:
        return self._last_seen_epochs.get(tp)

    def current_leader(self, tp: TopicPartition) -> LeaderAndEpoch:
        return self.cluster.leader_and_epoch(tp)

    def topic_error(self, topic: str) -> ErrorCode | None:
        return self.cluster.topic_errors.get(topic)

    # Whom to ask -------------------------------------------------------------

    def candidates(self, now_ms: int) -> list[Address]:
        """Addresses to try in order: known brokers, then bootstrap servers, least recently failed first."""
        known = [b.address for b in sorted(self.cluster.brokers.values(), key=lambda b: b.node_id)]
        ordered: list[Address] = []
        for address in known + self.bootstrap:
            if address not in ordered:
                ordered.append(address)
        # Stable sort: never-failed first in their order, then the ones that failed longest ago.
        return sorted(ordered, key=lambda a: self._failed_at.get(a, -1))

    def node_failed(self, address: Address, now_ms: int) -> None:
        self._failed_at[address] = now_ms

    def node_succeeded(self, address: Address) -> None:
        self._failed_at.pop(address, None)
