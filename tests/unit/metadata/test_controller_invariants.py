"""Random sequences of requests, ticks, commits and failovers keep the metadata invariants.

After every step, on both the latest (uncommitted) and the committed image:
every partition's leader is -1 or an ISR member that is a replica and a usable
(unfenced, not shutting down) broker; the ISR is a non-empty subset of the
replicas; replicas are distinct; leader and partition epochs never go down.
At the end, replaying the whole log from scratch gives the committed image,
and the committed image survives a snapshot round trip.
"""

from __future__ import annotations

import uuid

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kraftpy.metadata.configs import ConfigResourceType
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    AllocateProducerIdsRequest,
    AlterConfigOp,
    AlterConfigOpType,
    AlterConfigsResource,
    AlterPartitionItem,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    ConfigResource,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectionType,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    UnregisterBrokerRequest,
)
from kraftpy.metadata.harness import ControllerHarness, check_image_invariants
from kraftpy.metadata.image.metadata_delta import MetadataDelta
from kraftpy.metadata.image.metadata_image import NO_LEADER, MetadataImage
from kraftpy.metadata.records import Listener

BROKERS = st.integers(0, 4)
NAMES = st.sampled_from(["a", "b", "c.d", "c_d", "e"])


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # min ISR 2 by default, so ISRs fall below it and eligible leader replicas (KIP-966) come and go.
        config = ControllerConfig(cluster_id="c", leader_imbalance_check_interval_seconds=20, min_insync_replicas=2)
        self.h = ControllerHarness(config, auto_commit=True)
        # Start from a small live cluster with one topic, so every step has something to act on.
        self.h.start_brokers([0, 1, 2], racks={0: "r1", 1: "r2", 2: "r1"})
        self.h.send(CreateTopicsRequest((CreatableTopic("a", 4, 3), CreatableTopic("c.d", 2, 2))))
        self.h.auto_commit = False
        self.committed_epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.latest_epochs: dict[tuple[uuid.UUID, int], tuple[int, int]] = {}
        self.incarnations = 0

    # --- brokers ---------------------------------------------------------------------------------
    @rule(broker=BROKERS, rack=st.sampled_from([None, "r1", "r2"]), clean=st.booleans())
    def register(self, broker: int, rack: str | None, clean: bool) -> None:
        self.incarnations += 1
        previous = self.h.broker_epochs.get(broker, -1) if clean else -1
        listeners = (Listener("P", "h", 1),)
        request = BrokerRegistrationRequest(broker, "c", f"inc-{self.incarnations}", listeners, rack, previous)
        result = self.h.send(request)
        if not result.error:
            self.h.broker_epochs[broker] = result.response.broker_epoch

    @rule(broker=BROKERS, shutdown=st.booleans(), lag=st.integers(0, 3))
    def heartbeat(self, broker: int, shutdown: bool, lag: int) -> None:
        epoch = self.h.broker_epochs.get(broker, 0)
        self.h.send(BrokerHeartbeatRequest(broker, epoch, self.h.committed.offset - lag, shutdown))

    @rule()
    def heartbeat_everyone(self) -> None:
        for broker, epoch in self.h.broker_epochs.items():
            self.h.send(BrokerHeartbeatRequest(broker, epoch, self.h.committed.offset))

    @rule(broker=BROKERS)
    def unregister(self, broker: int) -> None:
        self.h.send(UnregisterBrokerRequest(broker))

    @rule(ms=st.sampled_from([100, 3000, 9500, 20_000]))
    def tick(self, ms: int) -> None:
        self.h.tick(self.h.now_ms + ms)

    # --- topics -------------------------------------------------------------------------------------
    @rule(name=NAMES, partitions=st.integers(1, 6), rf=st.integers(1, 3))
    def create_topic(self, name: str, partitions: int, rf: int) -> None:
        self.h.send(CreateTopicsRequest((CreatableTopic(name, partitions, rf),)))

    @rule(name=NAMES, data=st.data())
    def create_topic_manually(self, name: str, data: st.DataObject) -> None:
        rf = data.draw(st.integers(1, 3))
        replicas = st.lists(BROKERS, min_size=rf, max_size=rf, unique=True).map(tuple)
        assignment = tuple(data.draw(st.lists(replicas, min_size=1, max_size=4)))
        self.h.send(CreateTopicsRequest((CreatableTopic(name, assignments=assignment),)))

    @rule(name=NAMES)
    def delete_topic(self, name: str) -> None:
        self.h.send(DeleteTopicsRequest(names=(name,)))

    @rule(name=NAMES, count=st.integers(1, 9))
    def create_partitions(self, name: str, count: int) -> None:
        self.h.send(CreatePartitionsRequest((CreatePartitionsTopic(name, count),)))

    @rule(name=NAMES, unclean=st.booleans())
    def set_unclean(self, name: str, unclean: bool) -> None:
        ops = (AlterConfigOp("unclean.leader.election.enable", value=unclean),)
        resource = ConfigResource(ConfigResourceType.TOPIC, name)
        self.h.send(IncrementalAlterConfigsRequest((AlterConfigsResource(resource, ops),)))

    @rule(name=st.one_of(NAMES, st.just("")), value=st.sampled_from([1, 2, 3, None]))
    def set_min_isr(self, name: str, value: int | None) -> None:
        """A topic's min.insync.replicas, or the cluster's default (name ""); None deletes it."""
        kind = ConfigResourceType.TOPIC if name else ConfigResourceType.BROKER
        ops = (
            AlterConfigOp(
                "min.insync.replicas", value=value, op=AlterConfigOpType.SET if value else AlterConfigOpType.DELETE
            ),
        )
        self.h.send(IncrementalAlterConfigsRequest((AlterConfigsResource(ConfigResource(kind, name), ops),)))

    # --- partitions ---------------------------------------------------------------------------------
    @precondition(lambda self: len(self.h.latest.topics) > 0)
    @rule(data=st.data())
    def alter_partition(self, data: st.DataObject) -> None:
        image = self.h.latest
        topic = image.topics.get(data.draw(st.sampled_from(sorted(image.topics.by_name))))
        p = data.draw(st.integers(0, len(topic.partitions) - 1))
        part = topic.partitions[p]
        if part.leader == NO_LEADER:
            return
        others = [b for b in part.replicas if b != part.leader]
        chosen = data.draw(st.lists(st.sampled_from(others), unique=True)) if others else []
        stale = data.draw(st.sampled_from([0, 0, 0, 1]))
        item = AlterPartitionItem(
            topic.topic_id, p, part.leader_epoch, (part.leader, *chosen), part.partition_epoch - stale
        )
        epoch = self.h.broker_epochs.get(part.leader, -1)
        self.h.send(AlterPartitionRequest(part.leader, epoch, (item,)))

    @rule(kind=st.sampled_from(ElectionType), everything=st.booleans(), name=NAMES, p=st.integers(0, 5))
    def elect(self, kind: ElectionType, everything: bool, name: str, p: int) -> None:
        self.h.send(ElectLeadersRequest(kind, None if everything else ((name, p),)))

    @rule(broker=BROKERS)
    def producer_ids(self, broker: int) -> None:
        before = self.h.latest.producer_ids.next_producer_id
        result = self.h.send(AllocateProducerIdsRequest(broker, self.h.broker_epochs.get(broker, -1)))
        if not result.error:
            assert result.response.producer_id_start == before

    # --- Raft ------------------------------------------------------------------------------------------
    @rule(batches=st.integers(0, 3))
    def commit(self, batches: int) -> None:
        self.h.commit(batches)

    @rule()
    def commit_all(self) -> None:
        self.h.commit()

    @rule(lose=st.booleans())
    def fail_over(self, lose: bool) -> None:
        if not lose:
            self.h.commit()
        self.h.fail_over()
        assert self.h.latest is self.h.committed
        self.latest_epochs = dict(self.committed_epochs)

    # --- invariants ---------------------------------------------------------------------------------
    @invariant()
    def images_are_consistent(self) -> None:
        check_image_invariants(self.h.latest, min_isr_default=2)
        check_image_invariants(self.h.committed, min_isr_default=2)

    @invariant()
    def epochs_never_go_down(self) -> None:
        """Committed epochs only grow; so do the latest image's while this controller stays active
        (a failover may drop uncommitted bumps, which no broker ever saw)."""
        self._check_monotonic(self.h.committed, self.committed_epochs)
        self._check_monotonic(self.h.latest, self.latest_epochs)

    @staticmethod
    def _check_monotonic(image: MetadataImage, seen: dict[tuple[uuid.UUID, int], tuple[int, int]]) -> None:
        for topic in image.topics.by_id.values():
            for p, part in enumerate(topic.partitions):
                key = (topic.topic_id, p)
                before = seen.get(key, (-1, -1))
                assert part.leader_epoch >= before[0] and part.partition_epoch >= before[1], (key, before, part)
                seen[key] = (part.leader_epoch, part.partition_epoch)

    def teardown(self) -> None:
        """Replaying the whole log gives the committed image, which survives a snapshot round trip."""
        self.h.commit()
        delta = MetadataDelta(MetadataImage.EMPTY)
        for offset, record in self.h.log:
            delta.replay(record, offset)
        committed = self.h.committed
        replayed = delta.apply(epoch=committed.epoch)
        assert replayed == committed
        assert MetadataImage.decode(committed.encode()) == committed


ControllerMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestControllerInvariants = ControllerMachine.TestCase
