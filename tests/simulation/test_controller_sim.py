"""Brokers around the active controller under crashes, restarts, lost heartbeats, failovers and ISR churn.

See controller_sim.py for the model and the invariants. CI runs CI_SEEDS seeds;
`pytest tests/simulation/test_controller_sim.py --seeds 2000` soaks and
`--seed-start S --seeds 1` replays one.
"""

from __future__ import annotations

import dataclasses

import pytest

from kraftpy.metadata.controller import replication_control
from tests.simulation.broken_controllers import elects_outside_the_isr
from tests.simulation.controller_sim import ControllerSim, InvariantViolation

CI_SEEDS = 40


def test_controller_invariants_hold_across_seeds(seed_range: range | None) -> None:
    seeds = seed_range if seed_range is not None else range(CI_SEEDS)
    totals = {"fencings": 0, "failovers": 0, "isr_changes": 0, "leader_changes": 0}
    for seed in seeds:
        try:
            stats = ControllerSim(seed).run()
        except InvariantViolation as exc:
            pytest.fail(f"{exc}\nreplay: pytest tests/simulation/test_controller_sim.py --seed-start {seed} --seeds 1")
        for key in totals:
            totals[key] += getattr(stats, key)
    # The runs must actually exercise what the invariants are about.
    n = len(seeds)
    assert totals["fencings"] >= n, totals
    assert totals["failovers"] >= n, totals
    assert totals["isr_changes"] >= 5 * n, totals
    assert totals["leader_changes"] >= 5 * n, totals


def test_the_same_seed_gives_the_same_run() -> None:
    a, b = ControllerSim(7).run(), ControllerSim(7).run()
    assert a == b


def test_the_checker_catches_an_isr_change_without_a_record() -> None:
    """A broken 'controller' that edits the ISR behind the log's back is caught at the next commit."""
    sim = ControllerSim(3, steps=60)
    for _ in range(60):
        sim.step(faults=True)
    sim.commit()
    image = sim.harness.committed
    topic = next((t for t in image.topics.by_id.values() if len(t.partitions[0].isr) > 1), None)
    assert topic is not None, "seed 3 created no replicated topic"
    part = topic.partitions[0]
    forged = part._replace(isr=part.isr[:1], leader=part.isr[0])
    forged_topic = dataclasses.replace(topic, partitions=topic.partitions.evolve({0: forged}))
    topics = dataclasses.replace(image.topics, by_id=image.topics.by_id.set(topic.topic_id, forged_topic))
    forged_image = dataclasses.replace(image, offset=image.offset + 1, topics=topics)
    with pytest.raises(InvariantViolation, match="without a committed record"):
        sim.check_commit(image, forged_image)


def first_violation(within: int) -> str | None:
    for seed in range(within):
        try:
            ControllerSim(seed).run()
        except InvariantViolation as exc:
            return str(exc)
    return None


def test_the_checker_catches_a_controller_that_elects_outside_the_isr(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken controller: every election takes the first live replica, in the ISR or not, and adds it."""
    elects_outside_the_isr(monkeypatch)
    message = first_violation(within=20)
    assert message is not None, "the checkers missed elections from outside the ISR"
    assert "from outside its ISR" in message, message


def test_the_checker_catches_a_controller_that_accepts_stale_isr_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken controller: an AlterPartition at an old partition epoch is applied as if it were current."""
    check = replication_control._check_alter_partition

    def accepts_stale(image, broker_id, topic, part, item):
        if item.partition_epoch < part.partition_epoch:
            item = dataclasses.replace(item, partition_epoch=part.partition_epoch)
        return check(image, broker_id, topic, part, item)

    monkeypatch.setattr(replication_control, "_check_alter_partition", accepts_stale)
    message = first_violation(within=20)
    assert message is not None, "the checkers missed ISR changes accepted at a stale partition epoch"
    assert "accepted while the controller held" in message, message


def test_an_election_from_an_isr_that_grew_in_the_same_commit_is_not_outside_the_isr() -> None:
    """Found by the soak (seed 5): an ISR expansion and a fencing that elects the added replica commit
    together. The leader came from the ISR in effect just before its record, which is what counts."""
    from kraftpy.metadata.controller.requests import AlterPartitionItem, AlterPartitionRequest, CreatableTopic
    from kraftpy.metadata.controller.requests import CreateTopicsRequest as Create
    from kraftpy.metadata.harness import ControllerHarness
    from tests.simulation.controller_sim import CommittedHistoryChecker, InvariantViolation

    harness = ControllerHarness(auto_commit=False)
    harness.start_brokers([0, 1, 2])
    topic_id = harness.send(Create((CreatableTopic("t", 1, 3),))).response.results[0].topic_id
    harness.commit()
    part = harness.committed.partition(topic_id, 0)
    leader = part.leader
    first_follower = next(r for r in part.replicas if r != leader)
    shrunk = tuple(r for r in part.isr if r != first_follower)

    def alter(isr: tuple[int, ...]) -> None:
        p = harness.latest.partition(topic_id, 0)
        item = AlterPartitionItem(topic_id, 0, p.leader_epoch, isr, p.partition_epoch)
        assert harness.send(AlterPartitionRequest(leader, harness.broker_epochs[leader], (item,))).error is None

    alter(shrunk)
    harness.commit()
    old = harness.committed
    alter(part.isr)  # the follower is back in the ISR ...
    harness.register(leader, incarnation="restarted")  # ... and the leader restarts: fenced, leadership moves
    harness.commit()
    new = harness.committed
    assert new.partition(topic_id, 0).leader == first_follower, "the scenario elects the replica just added"
    records = [r for offset, r in harness.log if old.offset < offset <= new.offset]
    problem = CommittedHistoryChecker().check(old, new, records)
    if problem is not None:
        raise InvariantViolation(problem)
