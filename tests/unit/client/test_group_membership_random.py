"""Random group lives (hypothesis): consumers join, crash, close, stall and topics grow, on a virtual clock.

Throughout: no partition has two owners among the group's members. At the
end, once everyone polls again for long enough: one stable generation, every
partition assigned exactly once.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.client.group.membership import MemberState
from tests.unit.client.test_group_membership_sim import Sim, all_partitions

steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 9)),
        st.tuples(st.just("kill"), st.integers(0, 9)),
        st.tuples(st.just("close"), st.integers(0, 9)),
        st.tuples(st.just("stall"), st.integers(0, 9)),
        st.tuples(st.just("resume"), st.integers(0, 9)),
        st.tuples(st.just("grow"), st.integers(1, 3)),
        st.tuples(st.just("run"), st.sampled_from([50, 300, 1_000, 4_000, 12_000, 35_000])),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([("range",), ("roundrobin",), ("sticky",), ("cooperative-sticky",)]), steps)
def test_random_group_lives_never_double_assign_and_settle(assignors, script) -> None:
    sim = Sim({"t": 4}, initial_delay_ms=200)
    names = iter(f"c{i}" for i in range(100))
    sim.add(next(names), assignors=assignors, max_poll_interval_ms=20_000)
    for op, arg in script:
        live = sim.live()
        if op == "add" and len(live) < 5:
            sim.add(next(names), assignors=assignors, max_poll_interval_ms=20_000)
        elif op in ("kill", "close", "stall", "resume") and live:
            app = live[arg % len(live)]
            if op == "kill":
                sim.kill(app)
            elif op == "stall":
                app.polling = False
            elif op == "resume" and not app.polling:
                app.polling, app.next_poll_ms = True, sim.now
            elif op == "close":
                done = app.m.close(sim.now, 2_000)
                for _ in range(50):
                    app.m.poll(sim.now)
                    sim.pump()
                    if done.done:
                        break
                assert done.done
                sim.apps.remove(app)
        elif op == "grow":
            sim.set_topics({"t": sim.topics["t"] + arg})
        elif op == "run":
            sim.run(arg)
    if not sim.live():
        sim.add(next(names), assignors=assignors, max_poll_interval_ms=20_000)
    for app in sim.live():
        if not app.polling:
            app.polling, app.next_poll_ms = True, sim.now
    sim.run(80_000)  # sessions of the dead end, stalled ones rejoin, two-phase moves finish
    live = sim.live()
    group = sim.coordinator.group("g")
    assert all(a.m.state is MemberState.STABLE for a in live)
    assert {a.m.generation.generation_id for a in live} == {group.generation_id}
    assert {a.m.member_id for a in live} == set(group.members)
    owned = [tp for a in live for tp in a.store.assigned_partitions()]
    assert sorted(owned) == sorted(all_partitions(sim))
