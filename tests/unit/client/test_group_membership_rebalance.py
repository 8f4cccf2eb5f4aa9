"""Eager and cooperative rebalancing as the application sees it: listener calls, their order, and who owns what.

All runs are simulations on a virtual clock (test_group_membership_sim): the
membership cores talk to the real coordinator core. After every step the
simulation checks that no partition is owned by two live consumers.
"""

from __future__ import annotations

from kraftpy.client.group.membership import MemberState
from kraftpy.protocol.types import TopicPartition
from tests.unit.client.test_group_membership_sim import Sim, all_partitions, assignments


def tps(*numbers: int, topic: str = "t") -> set[TopicPartition]:
    return {TopicPartition(topic, n) for n in numbers}


def methods(app, since: int = 0) -> list[str]:
    return [name for at, name, _ in app.events if at >= since]


def test_eager_revokes_everything_before_joining_and_assigns_everything_after() -> None:
    sim = Sim()
    a = sim.add("a", assignors=("range",))
    sim.run(1_000)
    start = sim.now
    b = sim.add("b", assignors=("range",))
    sim.run(2_000)
    # a: revoked (all six) then assigned (its new half): eager gives everything back first.
    assert methods(a, start) == ["on_partitions_revoked", "on_partitions_assigned"]
    [revoked] = [p for at, name, p in a.events if at >= start and name == "on_partitions_revoked"]
    assert set(revoked) == all_partitions(sim)
    assert assignments(sim) == {"a": tps(0, 1, 2), "b": tps(3, 4, 5)}
    assert methods(b) == ["on_partitions_assigned"]


def test_eager_consumers_commit_on_revoke_and_the_next_owner_resumes_there() -> None:
    sim = Sim()
    a = sim.add("a", enable_auto_commit=False)  # only the listener's commit on revoke saves progress
    sim.run(2_000)
    b = sim.add("b", enable_auto_commit=False)
    sim.run(2_000)
    for tp in tps(3, 4, 5):
        # b starts right after the last record a returned: nothing lost, nothing read twice.
        assert b.consumed[tp][0] == a.consumed[tp][-1] + 1


def test_cooperative_moves_only_what_must_move_and_keeps_consuming_the_rest() -> None:
    sim = Sim({"t": 6})
    a = sim.add("a", assignors=("cooperative-sticky",))
    b = sim.add("b", assignors=("cooperative-sticky",))
    sim.run(2_000)
    before = assignments(sim)
    assert sorted(len(p) for p in before.values()) == [3, 3]
    start, generation = sim.now, a.m.generation.generation_id
    c = sim.add("c", assignors=("cooperative-sticky",))
    sim.run(3_000)
    after = assignments(sim)
    assert sorted(len(p) for p in after.values()) == [2, 2, 2]
    for app in (a, b):
        # Only the partition that moved was revoked; the others stayed and kept being consumed.
        revoked = [set(p) for at, name, p in app.events if at >= start and name == "on_partitions_revoked"]
        assert revoked == [before[app.name] - after[app.name]] and len(revoked[0]) == 1
        kept = before[app.name] & after[app.name]
        for tp in kept:
            assert any(o for o in app.consumed[tp] if o > 0)
            # consumed throughout the rebalance: one record per poll, no gap in the offsets it read
            offsets = app.consumed[tp]
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        assigned_during = [set(p) for at, name, p in app.events if at >= start and name == "on_partitions_assigned"]
        assert all(not p for p in assigned_during)  # cooperative: assigned names only what is new
    assert set().union(*(set(p) for p in c.calls("on_partitions_assigned"))) == after["c"]
    assert c.m.generation.generation_id == generation + 2  # two rebalances: revoke, then hand over


def test_eager_stops_the_world_cooperative_does_not() -> None:
    for assignor in ("range", "cooperative-sticky"):
        sim = Sim({"t": 4})
        a = sim.add("a", assignors=(assignor,))
        sim.add("b", assignors=(assignor,))
        sim.run(2_000)
        held, start = a.store.assigned_partitions(), sim.now
        sim.add("c", assignors=(assignor,))
        sim.run(3_000)
        revoked = [set(p) for at, name, p in a.events if at >= start and name == "on_partitions_revoked"]
        if assignor == "range":
            assert revoked == [held]  # everything stops, even what a keeps afterwards
        else:
            assert all(len(r) <= 1 for r in revoked)  # at most the one partition c takes from a


def test_a_consumer_that_leaves_hands_its_partitions_over() -> None:
    sim = Sim()
    a = sim.add("a")
    b = sim.add("b")
    sim.run(2_000)
    op = b.m.close(sim.now, 5_000)
    for _ in range(20):
        b.m.poll(sim.now)
        sim.pump()
        if op.done:
            break
    assert op.done and op.error is None and b.m.closed
    assert methods(b)[-1] == "on_partitions_revoked"
    sim.apps.remove(b)
    sim.run(2_000)
    assert a.store.assigned_partitions() == all_partitions(sim)


def test_a_killed_consumer_loses_its_partitions_after_the_session_timeout() -> None:
    sim = Sim()
    a = sim.add("a")
    b = sim.add("b")
    sim.run(2_000)
    sim.kill(b)
    sim.run(9_000)
    assert len(a.store.assigned_partitions()) == 3
    sim.run(3_000)  # b's 10 s session has run out
    assert a.store.assigned_partitions() == all_partitions(sim)


def test_a_consumer_that_stops_polling_leaves_and_gets_on_partitions_lost_when_it_returns() -> None:
    sim = Sim()
    a = sim.add("a", max_poll_interval_ms=5_000)
    b = sim.add("b", max_poll_interval_ms=5_000)
    sim.run(2_000)
    a.polling = False  # stuck processing; its heartbeats continue in the background
    sim.run(6_000)
    assert a.m.state is MemberState.UNJOINED  # it left after max_poll_interval_ms
    assert b.store.assigned_partitions() == all_partitions(sim)
    a.polling = True
    a.next_poll_ms = sim.now
    sim.run(2_000)
    assert "on_partitions_lost" in methods(a)
    lost = a.calls("on_partitions_lost")[0]
    assert len(lost) == 3
    assert len(a.store.assigned_partitions()) == 3


def test_a_static_consumer_restarting_within_its_session_keeps_its_partitions_without_a_rebalance() -> None:
    sim = Sim()
    a = sim.add("a", group_instance_id="host-a")
    b = sim.add("b", group_instance_id="host-b")
    sim.run(2_000)
    before = assignments(sim)
    generation = a.m.generation.generation_id
    op = b.m.close(sim.now, 1_000)  # a static member does not leave on close
    while not op.done:
        b.m.poll(sim.now)
        sim.pump()
    sim.apps.remove(b)
    sim.run(3_000)
    assert a.m.generation.generation_id == generation
    b2 = sim.add("b2", group_instance_id="host-b")
    sim.run(2_000)
    assert b2.store.assigned_partitions() == before["b"]
    assert a.m.generation.generation_id == generation and b2.m.generation.generation_id == generation
    assert methods(a) == ["on_partitions_assigned"]  # a never noticed


def test_pattern_subscriptions_pick_up_new_topics() -> None:
    sim = Sim({"orders-eu": 2, "payments": 2})
    a = sim.add("a", subscribe=r"orders-.*")
    sim.run(1_000)
    assert a.store.assigned_partitions() == tps(0, 1, topic="orders-eu")
    sim.set_topics({"orders-eu": 2, "orders-us": 1, "payments": 2, "__consumer_offsets": 50})
    sim.run(1_000)
    assert a.store.assigned_partitions() == tps(0, 1, topic="orders-eu") | tps(0, topic="orders-us")


def test_the_leader_rejoins_when_partitions_are_added() -> None:
    sim = Sim({"t": 2})
    a = sim.add("a")
    b = sim.add("b")
    sim.run(2_000)
    sim.set_topics({"t": 4})
    sim.run(2_000)
    assert set().union(*assignments(sim).values()) == all_partitions(sim)
    assert len(a.store.assigned_partitions()) == len(b.store.assigned_partitions()) == 2
