"""Consumers' membership cores against the real coordinator core, on a virtual clock (and tests of that setup).

No sockets, no threads: requests go straight to a GroupCoordinator, answers
straight back, appends complete at once. Each simulated application polls
every `poll_every_ms`, "consumes" one record per assigned partition per poll,
records every listener call, commits in on_partitions_revoked (unless told
not to) and seeks to the committed offset in on_partitions_assigned, as the
seeds ask a ConsumerRebalanceListener to do.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kraftpy.broker.groups import Append, GroupCoordinator, GroupCoordinatorConfig, Respond
from kraftpy.client.group.assignors import make_assignors
from kraftpy.client.group.commits import OffsetAndMetadata
from kraftpy.client.group.membership import GroupMembership, MemberState
from kraftpy.client.group.membership_types import (
    GroupMembershipConfig,
    InvokeListener,
    RunCommitCallback,
    SendRequest,
    SimpleAssignmentStore,
)
from kraftpy.protocol.types import TopicPartition

GROUP = "g"


@dataclass
class App:
    name: str
    m: GroupMembership
    store: SimpleAssignmentStore
    poll_every_ms: int = 100
    commit_on_revoke: bool = True
    alive: bool = True
    polling: bool = True
    next_poll_ms: int = 0
    events: list[tuple[int, str, tuple[TopicPartition, ...]]] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)
    pending_listener: tuple[InvokeListener, list[Any]] | None = None
    consumed: dict[TopicPartition, list[int]] = field(default_factory=dict)

    def calls(self, method: str) -> list[tuple[TopicPartition, ...]]:
        return [parts for _, name, parts in self.events if name == method]


class Sim:
    def __init__(
        self,
        topics: dict[str, int] | None = None,
        *,
        initial_delay_ms: int = 0,
        seed: int = 0,
        coordinator_config: GroupCoordinatorConfig | None = None,
    ) -> None:
        self.topics = dict(topics or {"t": 6})
        config = coordinator_config or GroupCoordinatorConfig(
            offsets_topic_num_partitions=1, group_initial_rebalance_delay_ms=initial_delay_ms
        )
        self.coordinator = GroupCoordinator(config, rng=random.Random(seed))
        self.coordinator.complete_loading(0, [], 0)
        self.now = 0
        self.apps: list[App] = []
        self._routes: dict[int, tuple[App, int]] = {}
        self._next_rid = 0
        self.checks: list[Callable[[Sim], None]] = [check_no_partition_owned_twice]
        self.coordinator_up = True

    # --- building -----------------------------------------------------------------------------

    def add(
        self,
        name: str,
        *,
        assignors: tuple[str, ...] = ("range",),
        subscribe: tuple[str, ...] | str = ("t",),
        listener: bool = True,
        commit_on_revoke: bool = True,
        **config: Any,
    ) -> App:
        store = SimpleAssignmentStore()
        settings = {
            "session_timeout_ms": 10_000,
            "heartbeat_interval_ms": 1_000,
            "max_poll_interval_ms": 30_000,
            "client_id": name,
            **config,
        }
        m = GroupMembership(GroupMembershipConfig(GROUP, **settings), make_assignors(assignors), store)
        if isinstance(subscribe, str):
            m.subscribe_pattern(subscribe, listener=listener)
        else:
            m.subscribe(subscribe, listener=listener)
        m.on_metadata(self.topics, self.now)
        app = App(name, m, store, commit_on_revoke=commit_on_revoke, next_poll_ms=self.now)
        self.apps.append(app)
        return app

    def set_topics(self, topics: dict[str, int]) -> None:
        self.topics = dict(topics)
        for app in self.live():
            app.m.on_metadata(self.topics, self.now)

    def live(self) -> list[App]:
        return [a for a in self.apps if a.alive]

    def kill(self, app: App) -> None:
        """SIGKILL: no LeaveGroup, no commit; the coordinator finds out by the session timeout."""
        app.alive = False

    # --- running ------------------------------------------------------------------------------

    def run(self, ms: int) -> None:
        end = self.now + ms
        while True:
            self.pump()
            candidates = [end]
            for app in self.live():
                if app.polling:
                    candidates.append(app.next_poll_ms)
                deadline = app.m.next_deadline_ms()
                if deadline is not None:
                    candidates.append(deadline)
            deadline = self.coordinator.next_deadline_ms()
            if deadline is not None:
                candidates.append(deadline)
            t = max(self.now, min(candidates))
            if t > end:
                break
            self.now = t
            self._coordinator_actions(self.coordinator.tick(self.now))
            for app in self.live():
                app.m.tick(self.now)
                if app.polling and app.next_poll_ms <= self.now:
                    app.next_poll_ms = self.now + app.poll_every_ms
                    self.poll(app)
            self.pump()
            if t == end:
                break
        self.now = end

    def poll(self, app: App) -> None:
        """The application's poll(): drive the membership, then consume one record per assigned partition."""
        app.m.poll(self.now)
        self.pump()
        error = app.m.take_error()
        if error is not None:
            app.errors.append(error)
        if app.pending_listener is None and app.m.state is MemberState.STABLE:
            for tp in sorted(app.store.assigned_partitions() - app.store.pending_revocation):
                position = app.store.positions.get(tp)
                if position is not None:
                    app.consumed.setdefault(tp, []).append(position.offset)
                    app.store.consume(tp, position.offset + 1)

    def pump(self) -> None:
        for _ in range(10_000):
            progressed = False
            for app in self.live():
                for action in app.m.drain():
                    progressed = True
                    self._do(app, action)
                if app.pending_listener is not None and all(op.done for op in app.pending_listener[1]):
                    for op in app.pending_listener[1]:
                        if op.kind == "fetch" and op.error is None:
                            seek_to_committed(app, op.result)  # the application seeks in on_partitions_assigned
                    app.pending_listener = None
                    progressed = True
                    app.m.listener_done(self.now)
            for check in self.checks:
                check(self)
            if not progressed:
                return
        raise AssertionError("the simulation does not settle")

    def _do(self, app: App, action: Any) -> None:
        if isinstance(action, SendRequest):
            if not self.coordinator_up:
                return  # lost on the wire; the shell would time it out
            if action.api == "find_coordinator":
                assert action.node is None
                app.m.on_response(
                    action.request_id, {"error_code": 0, "node_id": 1, "host": "h", "port": 9092}, self.now
                )
                return
            assert action.node is not None
            self._next_rid += 1
            self._routes[self._next_rid] = (app, action.request_id)
            self._coordinator_actions(self.coordinator.handle(self._next_rid, action.api, action.body, self.now))
        elif isinstance(action, InvokeListener):
            app.events.append((self.now, action.method, action.partitions))
            ops: list[Any] = []
            if action.method == "on_partitions_revoked" and app.commit_on_revoke:
                revoked = {tp: om for tp, om in app.store.all_consumed().items() if tp in action.partitions}
                if revoked:
                    ops.append(app.m.commit_sync(revoked, self.now, 5_000))
            if action.method == "on_partitions_assigned" and action.partitions:
                ops.append(app.m.committed(action.partitions, self.now, 5_000))
            app.pending_listener = (action, ops)
        elif isinstance(action, RunCommitCallback):
            action.callback(action.offsets, action.error)

    def _coordinator_actions(self, actions: list[Any]) -> None:
        for action in actions:
            if isinstance(action, Append):
                self._coordinator_actions(self.coordinator.append_completed(action.append_id, 0, self.now))
            else:
                assert isinstance(action, Respond)
                app, rid = self._routes.pop(action.request_id)
                if app.alive:
                    app.m.on_response(rid, action.body, self.now)


def check_no_partition_owned_twice(sim: Sim) -> None:
    """Among the group's members, no partition has two owners (eager or cooperative alike).

    A member the coordinator dropped (rebalance or session timeout) or that dropped itself (it left
    after max_poll_interval_ms) may still list partitions until it notices and calls
    on_partitions_lost: Kafka's zombie window. It can no longer commit them: its generation is gone.
    """
    group = sim.coordinator.group(GROUP)
    members = set(group.members) if group is not None else set()
    owners: dict[TopicPartition, str] = {}
    for app in sim.live():
        if not app.m.generation.is_valid or app.m.member_id not in members:
            continue
        for tp in app.store.assigned_partitions():
            assert tp not in owners, f"{tp} is owned by {owners[tp]} and {app.name} at {sim.now}"
            owners[tp] = app.name


def seek_to_committed(app: App, op_result: dict[TopicPartition, OffsetAndMetadata | None]) -> None:
    for tp, om in op_result.items():
        if tp in app.store.positions:
            app.store.positions[tp] = om or OffsetAndMetadata(0)


def all_partitions(sim: Sim, topics: tuple[str, ...] = ("t",)) -> set[TopicPartition]:
    return {TopicPartition(t, p) for t in topics for p in range(sim.topics.get(t, 0))}


def assignments(sim: Sim) -> dict[str, set[TopicPartition]]:
    return {a.name: a.store.assigned_partitions() for a in sim.live()}


def test_one_consumer_gets_everything_and_starts_from_the_beginning() -> None:
    sim = Sim()
    a = sim.add("a")
    sim.run(1_000)
    assert a.m.state is MemberState.STABLE and a.m.generation.generation_id == 1
    assert a.store.assigned_partitions() == all_partitions(sim)
    assert a.calls("on_partitions_assigned") == [tuple(sorted(all_partitions(sim)))]
    assert a.calls("on_partitions_revoked") == []  # nothing to revoke on the very first join


def test_the_simulation_spreads_six_partitions_over_three_consumers() -> None:
    sim = Sim(initial_delay_ms=500)
    apps = [sim.add(n) for n in "abc"]
    sim.run(3_000)
    owned = assignments(sim)
    assert set().union(*owned.values()) == all_partitions(sim)
    assert all(len(p) == 2 for p in owned.values())
    assert {a.m.generation.generation_id for a in apps} == {1}
