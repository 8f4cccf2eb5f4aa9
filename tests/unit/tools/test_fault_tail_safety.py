"""When a lose-tail fault may run (tools/faults/tail_safety.py): never on the last clean in-sync copy.

The situations are the ones of `kraftpy faults run --nemesis disk --seed 105/106` (docs/jepsen.md): node 3
offline (its disk full), node 2 lost its tail and restarted, then node 1 lost its tail seconds later,
before anyone had fenced node 2's old incarnation, and acknowledged writes were gone from every copy.
"""

from __future__ import annotations

from kraftpy.tools.faults.tail_safety import NO_ANSWER, NodeView, TailSafety

ALL = (1, 2, 3)


def view(
    node: int,
    isr: dict[int, tuple[int, ...]],
    *,
    registered: bool = True,
    replicas=ALL,
    heartbeat_age_ms: int | None = 0,
) -> NodeView:
    return NodeView(node, registered, {p: replicas for p in isr}, isr, heartbeat_age_ms)


def views(*found: NodeView) -> dict[int, NodeView]:
    return {v.node: v for v in found}


def test_a_full_isr_of_clean_replicas_lets_any_node_lose_its_tail() -> None:
    full = {0: ALL, 1: ALL, 2: ALL}
    seen = views(view(1, full), view(2, full), view(3, full))
    assert all(TailSafety().blockers(n, seen) == {} for n in ALL)


def test_seed_105_a_second_power_loss_on_the_last_clean_copy_waits() -> None:
    """Node 3's replica offline, node 2 restarted from a lost tail and not back: node 1 is the last clean copy."""
    tails = TailSafety()
    tails.lost_tail(2, [0, 1, 2])
    stale = {0: (1, 2), 1: (1, 2), 2: (1, 2)}  # node 2's old incarnation is still listed
    seen = views(view(1, stale), view(2, stale, registered=False))  # node 2 not registered again yet
    tails.observe(seen)
    assert tails.blockers(1, seen) == {0: [1, 2], 1: [1, 2], 2: [1, 2]}
    assert tails.blockers(2, seen) == {}  # node 1 is clean and in sync: node 2 may lose its tail again


def test_a_restarted_node_counts_again_once_its_own_answer_shows_it_back_in_the_isr() -> None:
    tails = TailSafety()
    tails.lost_tail(2, [0, 1])
    back = {0: (1, 2), 1: (1,)}  # in sync again on partition 0, still catching up on 1
    tails.observe(views(view(1, back), view(2, back)))
    assert tails.blockers(1, views(view(1, back), view(2, back))) == {1: [1]}
    tails.observe(views(view(2, {0: (1, 2), 1: (1, 2)})))
    assert tails.tainted == {}


def test_only_the_nodes_own_answer_after_its_registration_clears_it() -> None:
    """Another node's image, or the restarted node's image replayed before its registration, may still list
    the old incarnation, whose log was cut."""
    tails = TailSafety()
    tails.lost_tail(2, [0])
    listed = {0: (1, 2)}
    tails.observe(views(view(1, listed), view(3, listed)))
    assert not tails.clean(2, 0)
    tails.observe(views(view(2, listed, registered=False)))
    assert not tails.clean(2, 0)
    tails.observe(views(view(2, listed)))
    assert tails.clean(2, 0)


def test_an_isr_member_counts_only_when_every_answering_node_lists_it() -> None:
    fresh, stale = {0: (1,)}, {0: (1, 3)}  # node 3 left the ISR; node 2's image has not seen it yet
    seen = views(view(1, fresh), view(2, stale), view(3, stale))
    assert TailSafety().blockers(1, seen) == {0: [1]}
    assert TailSafety().blockers(1, views(view(1, stale), view(2, stale), view(3, stale))) == {}


def test_seed_2101_a_member_that_does_not_answer_does_not_count() -> None:
    """Node 1 was killed, restarted and then paused past its broker session, out of the ISR since its restart,
    while node 2's image (just back from a partition) could still list it. Counted on another node's word,
    node 1 let node 2 lose its tail; node 2, the ISR's last member, led again with its cut log and node 1
    truncated to it: 103 acknowledged records gone (docs/jepsen.md)."""
    stale = {1: (1, 2)}
    assert TailSafety().blockers(2, views(view(2, stale))) == {1: [1, 2]}
    assert TailSafety().blockers(2, views(view(2, stale), view(1, stale))) == {}  # node 1's own word counts


def test_seed_2304_a_member_whose_heartbeats_go_unanswered_does_not_count() -> None:
    """Node 1, paused and then cut off as the Raft leader, answered again and every image (its own too)
    listed it with node 3 in faults-0's ISR for the whole settling time; but the new controller had not
    answered its heartbeats since the failover, and fenced it 0.5 s before node 3's tail was cut. Node
    3, left the ISR's last member, led again from its cut log: a committed record gone (docs/jepsen.md)."""
    isr = {0: (1, 3)}
    stale_heartbeat = views(view(1, isr, heartbeat_age_ms=4_800), view(2, isr), view(3, isr))
    assert TailSafety().blockers(3, stale_heartbeat) == {0: [1, 3]}
    never = views(view(1, isr, heartbeat_age_ms=None), view(3, isr))  # registered, never answered since
    assert TailSafety().blockers(3, never) == {0: [1, 3]}
    fresh = views(view(1, isr, heartbeat_age_ms=300), view(2, isr), view(3, isr))
    assert TailSafety().blockers(3, fresh) == {}
    assert TailSafety(heartbeat_fresh_ms=200).blockers(3, fresh) == {0: [1, 3]}


def test_partitions_the_node_does_not_replicate_do_not_block_it() -> None:
    isr = {0: (1,), 1: (2, 3, 4)}
    seen = {n: NodeView(n, True, {0: (1, 2, 3), 1: (2, 3, 4)}, isr, 0) for n in (2, 3, 4)}
    assert TailSafety().blockers(4, seen) == {}
    assert TailSafety().blockers(1, seen) == {0: [1]}


def test_with_no_answer_nothing_may_be_lost() -> None:
    assert TailSafety().blockers(1, {}) == {NO_ANSWER: []}


def test_the_old_model_would_have_let_both_in_sync_copies_go() -> None:
    """What `--lose-tail-unsafe` does (no wait): the seed-105 sequence runs, and the only copies of what the
    ISR {1, 2} acknowledged are both cut. The wait refuses exactly that second loss."""
    tails = TailSafety()
    isr = {1: (1, 2)}  # node 3's replica offline
    seen = views(view(1, isr), view(2, isr))
    assert tails.blockers(2, seen) == {}  # the first power loss is allowed: node 1 keeps a clean copy
    tails.lost_tail(2, [1])
    tails.observe(views(view(1, isr), view(2, isr, registered=False)))
    assert tails.blockers(1, seen) == {1: [1, 2]}
