"""The simulation kernel's own contract: determinism, the network's faults, the disk's lost fsyncs."""

from __future__ import annotations

import pytest

from tests.simulation.kernel import Disk, DiskConfig, InvariantViolation, Loop, Network, NetworkConfig, Violations


def test_events_run_in_time_then_schedule_order_and_time_never_goes_back() -> None:
    loop = Loop(1)
    ran: list[tuple[int, str]] = []
    loop.at(10, lambda: ran.append((loop.now, "b")))
    loop.at(5, lambda: ran.append((loop.now, "a")))
    loop.at(10, lambda: ran.append((loop.now, "c")))
    loop.run_until(lambda: False, 20)
    assert ran == [(5, "a"), (10, "b"), (10, "c")]
    assert loop.now == 20
    loop.at(3, lambda: ran.append((loop.now, "late")))  # scheduled in the past: runs now
    loop.step()
    assert ran[-1] == (20, "late")


def _run_network(seed: int) -> list[tuple[int, str]]:
    loop = Loop(seed)
    net = Network(loop, NetworkConfig(1, 50, drop_rate=0.2, duplicate_rate=0.2, spike_rate=0.2, spike_max_ms=300))
    net.faulty = True
    got: list[tuple[int, str]] = []
    for i in range(200):
        net.send("a", "b", lambda i=i: got.append((loop.now, f"m{i}")))
    loop.run_until(lambda: False, 10_000)
    return got


def test_the_same_seed_gives_the_same_network_run_and_faults_happen() -> None:
    first = _run_network(4)
    assert first == _run_network(4)
    assert first != _run_network(5)
    names = [m for _, m in first]
    assert len(set(names)) < 200, "some messages are lost"
    assert len(names) > len(set(names)), "some are duplicated"
    assert names != sorted(names, key=lambda m: int(m[1:])), "some overtake others"


def test_a_cut_loses_messages_sent_and_in_flight_and_only_in_its_direction() -> None:
    loop = Loop(0)
    net = Network(loop, NetworkConfig(5, 5))
    got: list[str] = []
    net.send("a", "b", lambda: got.append("in flight"))
    net.cut.add(("a", "b"))
    assert net.send("a", "b", lambda: got.append("after the cut")) == 0
    net.send("b", "a", lambda: got.append("other way"))
    loop.run_until(lambda: False, 100)
    assert got == ["other way"]
    net.heal()
    net.send("a", "b", lambda: got.append("healed"))
    loop.run_until(lambda: False, 200)
    assert got[-1] == "healed"


def test_options_at_zero_draw_nothing_from_the_generator() -> None:
    """A workload that never drops keeps the random stream it had before the kernel had the option."""
    loop = Loop(9)
    net = Network(loop, NetworkConfig(1, 10))
    net.faulty = True
    net.send("a", "b", lambda: None)
    reference = Loop(9).rng
    reference.randint(1, 10)
    assert loop.rng.random() == reference.random()


def test_a_crash_cancels_the_fsync_in_flight_and_fsyncs_queue_per_node() -> None:
    loop = Loop(2)
    disk = Disk(loop, DiskConfig(10, 10))
    done: list[tuple[str, int]] = []
    disk.fsync("n1", lambda: done.append(("first", loop.now)))
    disk.fsync("n1", lambda: done.append(("second", loop.now)))
    disk.fsync("n2", lambda: done.append(("other node", loop.now)))
    loop.run_until(lambda: bool(done), 100)
    disk.crash("n1")
    loop.run_until(lambda: False, 100)
    assert done == [("first", 10), ("other node", 10)]
    immediate = Disk(loop, DiskConfig())
    immediate.fsync("n1", lambda: done.append(("sync", loop.now)))
    assert done[-1] == ("sync", 100)


def test_violations_are_collected_with_their_time_or_raised_at_once() -> None:
    loop = Loop(0)
    loop.run_until(lambda: False, 42)
    collected = Violations(lambda: loop.now, limit=2)
    for i in range(3):
        collected.report(f"broken {i}")
    assert collected.found == ["t=42 broken 0", "t=42 broken 1"]
    with pytest.raises(InvariantViolation, match="broken 0"):
        collected.raise_first()
    with pytest.raises(InvariantViolation, match=r"^at once$"):
        Violations(lambda: loop.now, strict=True).report("at once")
