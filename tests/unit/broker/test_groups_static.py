"""Static membership (KIP-345): restarts within the session keep the assignment; duplicates are fenced."""

from __future__ import annotations

from kraftpy.broker.groups import GroupState
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import SESSION, Harness, protocols

E = ErrorCode


def static_group(h: Harness, instances: tuple[str, ...] = ("i-a", "i-b")) -> tuple[dict[str, str], int]:
    """Static members joined and synced; returns {instance: member id} and the generation."""
    rids = {i: h.join(instance=i) for i in instances}  # no MEMBER_ID_REQUIRED round trip for static members
    while any(r not in h.answers for r in rids.values()):
        h.advance(1_000)
    ids = {i: h.answers[r]["member_id"] for i, r in rids.items()}
    generation = h.answers[rids[instances[0]]]["generation_id"]
    leader = h.answers[rids[instances[0]]]["leader"]
    for instance, member in ids.items():
        assignments = {m: f"for-{i}".encode() for i, m in ids.items()} if member == leader else None
        h.sync(member, generation, assignments=assignments, instance=instance)
    assert h.c.group("g").state is GroupState.STABLE
    return ids, generation


def test_static_members_join_without_the_member_id_round_trip() -> None:
    h = Harness()
    ids, generation = static_group(h)
    assert generation == 1 and all(m.startswith(i + "-") for i, m in ids.items())


def test_a_static_member_restarting_within_its_session_gets_its_assignment_back_without_a_rebalance() -> None:
    h = Harness()
    ids, generation = static_group(h)
    log_before = len(h.log[h.c.partition_for("g")])
    h.advance(SESSION - 1_000)  # i-b crashed and restarts (no LeaveGroup: static members do not leave)
    h.heartbeat(ids["i-a"], generation, instance="i-a")
    answer = h.answers[h.join(instance="i-b")]
    new_id = answer["member_id"]
    assert answer["error_code"] == 0 and new_id != ids["i-b"]
    assert answer["generation_id"] == generation and answer["members"] == [] and not answer["skip_assignment"]
    sync = h.answers[h.sync(new_id, generation, instance="i-b")]
    assert sync["assignment"] == b"for-i-b"
    group = h.c.group("g")
    assert group.state is GroupState.STABLE and group.generation_id == generation
    assert h.heartbeat(ids["i-a"], generation, instance="i-a") == E.NONE  # the others never noticed
    assert len(h.log[h.c.partition_for("g")]) == log_before + 1  # the new member id was stored


def test_the_old_incarnation_of_a_static_member_is_fenced() -> None:
    h = Harness()
    ids, generation = static_group(h)
    h.join(instance="i-b")
    old = ids["i-b"]
    assert h.heartbeat(old, generation, instance="i-b") == E.FENCED_INSTANCE_ID
    assert h.answers[h.sync(old, generation, instance="i-b")]["error_code"] == E.FENCED_INSTANCE_ID
    assert h.answers[h.join(member_id=old, instance="i-b")]["error_code"] == E.FENCED_INSTANCE_ID
    rid = h.commit({("t", 0): 3}, member_id=old, generation=generation, instance="i-b")
    assert h.commit_codes(rid) == {("t", 0): E.FENCED_INSTANCE_ID}
    body = h.call("leave_group", {"group_id": "g", "members": [{"member_id": old, "group_instance_id": "i-b"}]})
    assert body["members"][0]["error_code"] == E.FENCED_INSTANCE_ID


def test_a_restarted_static_leader_learns_it_leads_but_skips_the_assignment() -> None:
    h = Harness()
    _ids, generation = static_group(h)
    answer = h.answers[h.join(instance="i-a")]
    assert answer["skip_assignment"] and answer["leader"] == answer["member_id"]
    assert len(answer["members"]) == 2
    sync = h.answers[h.sync(answer["member_id"], generation, instance="i-a", assignments={})]
    assert sync["assignment"] == b"for-i-a"  # a Stable group hands out what it has


def test_a_static_member_that_stays_away_longer_than_its_session_is_removed() -> None:
    h = Harness()
    ids, generation = static_group(h)
    for _ in range(3):
        h.advance(SESSION // 2)
        h.heartbeat(ids["i-a"], generation, instance="i-a")
    assert ids["i-b"] not in h.c.group("g").members
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE


def test_a_static_member_not_rejoining_a_rebalance_keeps_its_place_until_its_session_ends() -> None:
    h = Harness()
    ids, generation = static_group(h)
    ja = h.join(member_id=ids["i-a"], instance="i-a")  # the leader rejoins: a rebalance; i-b is silent
    h.advance(SESSION - 1)
    assert ja not in h.answers and ids["i-b"] in h.c.group("g").members
    h.advance(1)  # i-b's session ends: it is removed and the join completes without it
    assert h.answers[ja]["generation_id"] == generation + 1
    assert set(h.c.group("g").members) == {ids["i-a"]}


def test_a_static_member_rejoining_with_another_protocol_triggers_a_rebalance() -> None:
    h = Harness()
    _ids, _generation = static_group(h)
    h.join(instance="i-b", protos=protocols("roundrobin", "range"))
    assert h.c.group("g").state is GroupState.STABLE  # range is still everyone's choice
    h.join(instance="i-a", protos=protocols("roundrobin", "range"))  # now roundrobin wins the vote
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE


def test_admin_removal_by_instance_id() -> None:
    h = Harness()
    ids, _generation = static_group(h)
    body = h.call("leave_group", {"group_id": "g", "members": [{"member_id": "", "group_instance_id": "i-b"}]})
    assert body["members"][0]["error_code"] == 0
    assert ids["i-b"] not in h.c.group("g").members
    body = h.call("leave_group", {"group_id": "g", "members": [{"member_id": "", "group_instance_id": "i-zzz"}]})
    assert body["members"][0]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_a_failed_write_of_the_new_member_id_keeps_the_old_one() -> None:
    h = Harness()
    ids, generation = static_group(h)
    h.auto_complete = False
    rid = h.join(instance="i-b")
    assert h.c.group("g").static_members["i-b"] != ids["i-b"]
    h.complete_appends(E.NOT_LEADER_OR_FOLLOWER)
    assert h.answers[rid]["error_code"] == E.NOT_COORDINATOR and h.answers[rid]["member_id"] == ""
    assert h.c.group("g").static_members["i-b"] == ids["i-b"]
    assert h.heartbeat(ids["i-b"], generation, instance="i-b") == E.NONE


def test_a_static_member_removed_while_its_new_id_is_written_is_left_alone_by_the_write() -> None:
    """The write of a restarted static member's new id completes after an admin removed the member:
    the callback finds nobody to answer or restore and leaves the group as the removal left it."""
    h = Harness()
    ids, _generation = static_group(h)
    h.auto_complete = False
    rid = h.join(instance="i-b")  # the new id's write is in flight
    new_id = h.c.group("g").static_members["i-b"]
    removal = h.send("leave_group", {"group_id": "g", "members": [{"member_id": "", "group_instance_id": "i-b"}]})
    h.auto_complete = True
    h.complete_appends()
    assert h.answers[removal]["members"][0]["error_code"] == 0
    assert new_id not in h.c.group("g").members and "i-b" not in h.c.group("g").static_members
    assert rid in h.answers  # the join was answered by the removal's rebalance or the removal itself
    assert ids["i-a"] in h.c.group("g").members


def test_a_static_member_replaced_while_completing_the_rebalance_forces_another_round() -> None:
    h = Harness()
    ids, generation = static_group(h)
    ja = h.join(member_id=ids["i-a"], instance="i-a")
    jb = h.join(member_id=ids["i-b"], instance="i-b")
    assert h.c.group("g").state is GroupState.COMPLETING_REBALANCE
    sb = h.sync(ids["i-b"], generation + 1, instance="i-b")
    restarted = h.join(instance="i-b")
    assert h.answers[sb]["error_code"] == E.FENCED_INSTANCE_ID
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert ja in h.answers and jb in h.answers and restarted not in h.answers
