"""The coordinator's rebalance protocol: join, sync, heartbeat, leave, timeouts and fencing (virtual time)."""

from __future__ import annotations

from kraftpy.broker.groups import GroupCoordinatorConfig, GroupState
from kraftpy.protocol.errors import ErrorCode
from tests.unit.broker.test_groups_harness import REBALANCE, SESSION, Harness, protocols

E = ErrorCode


def no_delay(**kwargs) -> Harness:
    return Harness(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4, **kwargs))


def test_a_dynamic_member_first_gets_an_id_then_joins_and_leads_generation_1() -> None:
    h = no_delay()
    first = h.answers[h.join(client_id="app")]
    assert first["error_code"] == E.MEMBER_ID_REQUIRED
    member = first["member_id"]
    assert member.startswith("app-") and h.c.group("g").pending_members == {member}
    rid = h.join(member_id=member)
    answer = h.answers[rid]  # the initial delay of 0 ms ends at the next tick, which the harness runs
    assert answer["error_code"] == 0
    assert (answer["generation_id"], answer["leader"], answer["member_id"]) == (1, member, member)
    assert answer["protocol_type"] == "consumer" and answer["protocol_name"] == "range"
    assert [m["member_id"] for m in answer["members"]] == [member]  # the leader sees everyone's metadata
    assert h.c.group("g").state is GroupState.COMPLETING_REBALANCE


def test_followers_get_no_member_list_and_wait_for_the_leaders_assignment() -> None:
    h = Harness()
    a, b = h.new_member(), h.new_member()
    ja, jb = h.join(member_id=a), h.join(member_id=b)
    h.advance(3_000)  # the initial delay stretched once for b ...
    assert ja not in h.answers
    h.advance(3_000)  # ... and then ended
    leader_answer, follower_answer = h.answers[ja], h.answers[jb]
    assert leader_answer["leader"] == a and len(leader_answer["members"]) == 2
    assert follower_answer["leader"] == a and follower_answer["members"] == []
    follower_sync = h.sync(b, 1)
    assert follower_sync not in h.answers  # waits for the leader
    leader_sync = h.sync(a, 1, assignments={a: b"for-a", b: b"for-b"})
    assert h.answers[leader_sync]["assignment"] == b"for-a"
    assert h.answers[follower_sync]["assignment"] == b"for-b"
    assert h.c.group("g").state is GroupState.STABLE


def test_a_member_the_leader_left_out_gets_an_empty_assignment() -> None:
    h = Harness()
    a, b = h.new_member(), h.new_member()
    h.join(member_id=a)
    jb = h.join(member_id=b)
    h.advance(6_000)
    assert h.answers[jb]["error_code"] == 0
    sb = h.sync(b, 1)
    h.sync(a, 1, assignments={a: b"x", "stranger": b"ignored"})
    assert h.answers[sb]["assignment"] == b""


def test_the_initial_delay_stretches_while_members_arrive_but_never_beyond_the_rebalance_timeout() -> None:
    h = Harness(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=1_000, offsets_topic_num_partitions=4))
    first = h.join(member_id=h.new_member(), rebalance=2_500)
    for _ in range(10):  # a member arrives every 900 ms, forever
        h.advance(900)
        h.join(member_id=h.new_member(), rebalance=2_500)
        if first in h.answers:
            break
    assert h.answers[first]["error_code"] == 0
    assert h.now <= 2_500 + 900  # bounded by the rebalance timeout, not by the arrivals


def test_the_initial_delay_is_cut_to_the_rebalance_timeout() -> None:
    h = Harness(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=3_000, offsets_topic_num_partitions=4))
    rid = h.join(member_id=h.new_member(), rebalance=500)
    h.advance(499)
    assert rid not in h.answers
    h.advance(1)
    assert h.answers[rid]["error_code"] == 0


def test_a_stretched_initial_delay_adds_one_more_delay_and_then_completes() -> None:
    """Delay 1 s, rebalance timeout 5 s: a member arriving in the first second stretches the wait by
    one more delay (to 2 s), not by what is left of the timeout; nobody arriving after that ends it."""
    h = Harness(GroupCoordinatorConfig(group_initial_rebalance_delay_ms=1_000, offsets_topic_num_partitions=4))
    first = h.join(member_id=h.new_member(), rebalance=5_000)
    h.advance(900)
    second = h.join(member_id=h.new_member(), rebalance=5_000)
    h.advance(1_099)  # 1,999 ms
    assert first not in h.answers
    h.advance(1)
    assert h.answers[first]["error_code"] == 0 and h.answers[second]["error_code"] == 0
    assert h.answers[first]["generation_id"] == 1 and len(h.answers[first]["members"]) == 2


def test_with_no_initial_delay_the_first_member_starts_alone() -> None:
    h = no_delay()
    a = h.new_member()
    ja = h.join(member_id=a)
    assert h.answers[ja]["generation_id"] == 1 and h.answers[ja]["members"][0]["member_id"] == a


def test_a_new_member_triggers_a_rebalance_that_waits_for_every_known_member() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    c = h.new_member()
    jc = h.join(member_id=c)
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE and jc not in h.answers
    assert h.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS
    ja = h.join(member_id=a)
    assert jc not in h.answers
    jb = h.join(member_id=b)  # the last one: the join completes at once
    assert {h.answers[r]["generation_id"] for r in (ja, jb, jc)} == {gen + 1}


def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2, rebalance=5_000)
    ja = h.join(member_id=a, rebalance=5_000)
    h.heartbeat(b, gen)
    h.advance(4_999)
    assert ja not in h.answers
    h.advance(1)
    assert h.answers[ja]["generation_id"] == gen + 1
    assert set(h.c.group("g").members) == {a}
    assert h.heartbeat(b, gen) == E.UNKNOWN_MEMBER_ID


def test_a_member_without_heartbeats_is_removed_after_its_session_timeout() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    for _ in range(4):
        h.advance(SESSION // 2)
        assert h.heartbeat(a, gen) == E.NONE or h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert b not in h.c.group("g").members
    assert h.heartbeat(a, gen) == E.REBALANCE_IN_PROGRESS


def test_the_session_counts_from_the_last_heartbeat_and_ends_exactly_at_the_timeout() -> None:
    h = Harness()
    (a,), gen = h.form_group(1)
    h.advance(SESSION - 1)
    assert h.heartbeat(a, gen) == E.NONE
    h.advance(SESSION - 1)
    assert a in h.c.group("g").members
    h.advance(1)
    assert a not in h.c.group("g").members
    assert h.c.group("g").state is GroupState.EMPTY


def test_a_member_waiting_in_a_rebalance_is_not_expired_by_its_session() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2, rebalance=REBALANCE)
    ja = h.join(member_id=a)  # waits for b for up to the rebalance timeout, far beyond a's session
    for _ in range(4):
        h.advance(SESSION // 2)
        assert h.heartbeat(b, gen) == E.REBALANCE_IN_PROGRESS  # b stays alive but does not rejoin
    assert a in h.c.group("g").members and ja not in h.answers
    h.advance(REBALANCE - 4 * (SESSION // 2))
    assert h.answers[ja]["error_code"] == 0 and set(h.c.group("g").members) == {a}


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2, rebalance=5_000)
    ja, jb = h.join(member_id=a, rebalance=5_000), h.join(member_id=b, rebalance=5_000)
    assert h.answers[ja]["generation_id"] == gen + 1
    sb = h.sync(b, gen + 1)
    h.advance(4_000)
    h.heartbeat(b, gen + 1)
    h.advance(1_000)  # the leader never sent its SyncGroup
    assert a not in h.c.group("g").members
    assert h.answers[sb]["error_code"] == E.REBALANCE_IN_PROGRESS
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert jb in h.answers


def test_stale_generations_and_unknown_members_are_fenced_everywhere() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    jc = h.join(member_id=h.new_member())
    h.join(member_id=a)
    h.join(member_id=b)
    assert jc in h.answers
    assert h.heartbeat(a, gen) == E.ILLEGAL_GENERATION
    assert h.answers[h.sync(a, gen)]["error_code"] == E.ILLEGAL_GENERATION
    rid = h.commit({("t", 0): 1}, member_id=a, generation=gen)
    assert h.commit_codes(rid) == {("t", 0): E.ILLEGAL_GENERATION}
    assert h.heartbeat("nobody", gen + 1) == E.UNKNOWN_MEMBER_ID
    assert h.heartbeat(a, gen + 1) == E.NONE  # CompletingRebalance: heartbeats are fine
    assert h.heartbeat(a, gen, group="other") == E.UNKNOWN_MEMBER_ID


def test_sync_while_preparing_asks_to_rejoin_and_heartbeat_in_an_empty_group_is_unknown() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    h.join(member_id=a)
    assert h.answers[h.sync(b, gen)]["error_code"] == E.REBALANCE_IN_PROGRESS
    h.leave(a, b)
    h.advance(0)
    assert h.c.group("g").state is GroupState.EMPTY
    assert h.heartbeat(a, gen + 1) == E.UNKNOWN_MEMBER_ID


def test_a_follower_rejoining_unchanged_in_a_stable_group_just_gets_the_current_generation() -> None:
    h = Harness()
    (_a, b), gen = h.form_group(2)
    answer = h.answers[h.join(member_id=b)]
    assert (answer["error_code"], answer["generation_id"], answer["members"]) == (0, gen, [])
    assert h.c.group("g").state is GroupState.STABLE


def test_a_leader_rejoin_or_changed_metadata_rebalances() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    h.join(member_id=a)  # the leader: forces a rebalance (it may have seen new partitions)
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    h.join(member_id=b)
    h.sync(a, gen + 1, assignments={})
    h.sync(b, gen + 1)
    assert h.c.group("g").state is GroupState.STABLE
    h.join(member_id=b, protos=protocols("range", topics=("t", "u")))
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE


def test_a_leave_rebalances_and_a_new_leader_is_chosen() -> None:
    h = Harness()
    (a, b), gen = h.form_group(2)
    body = h.leave(a)
    assert body["members"] == [{"member_id": a, "group_instance_id": None, "error_code": 0}]
    jb = h.join(member_id=b)
    assert h.answers[jb]["leader"] == b and h.answers[jb]["generation_id"] == gen + 1
    unknown = h.leave("ghost")["members"][0]
    assert unknown["error_code"] == E.UNKNOWN_MEMBER_ID


def test_the_last_member_leaving_empties_the_group_and_stores_the_empty_generation() -> None:
    h = Harness()
    (a,), gen = h.form_group(1)
    records_before = len(h.log[h.c.partition_for("g")])
    h.leave(a)
    group = h.c.group("g")
    assert group.state is GroupState.EMPTY and group.generation_id == gen + 1
    assert len(h.log[h.c.partition_for("g")]) == records_before + 1


def test_a_pending_member_that_never_returns_expires_and_the_blank_group_is_forgotten() -> None:
    h = Harness()
    h.new_member(session=SESSION)
    assert h.c.group("g") is not None
    h.advance(SESSION)
    assert h.c.group("g") is None


def test_protocol_selection_takes_the_most_voted_common_protocol() -> None:
    h = Harness()
    a = h.new_member(protos=protocols("range", "roundrobin"))
    b = h.new_member(protos=protocols("roundrobin", "range"))
    c = h.new_member(protos=protocols("roundrobin", "sticky", "range"))
    rids = [
        h.join(member_id=m, protos=p)
        for m, p in [
            (a, protocols("range", "roundrobin")),
            (b, protocols("roundrobin", "range")),
            (c, protocols("roundrobin", "sticky", "range")),
        ]
    ]
    h.advance(9_000)
    assert {h.answers[r]["protocol_name"] for r in rids} == {"roundrobin"}


def test_a_member_sharing_no_protocol_or_type_is_inconsistent() -> None:
    h = Harness()
    (a,), gen = h.form_group(1)
    answer = h.answers[h.join(protos=protocols("sticky"))]
    assert answer["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    answer = h.answers[h.join(protocol_type="connect")]
    assert answer["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.answers[h.join(group="empty", protocol_type="")]["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL
    assert h.c.group("empty") is None  # nothing lingers after a refused first join
    body = h.call("sync_group", {"group_id": "g", "member_id": a, "generation_id": gen, "protocol_name": "roundrobin"})
    assert body["error_code"] == E.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeouts_outside_the_broker_bounds_and_empty_group_ids_are_refused() -> None:
    h = Harness()
    assert h.answers[h.join(session=5_999)]["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert h.answers[h.join(session=1_800_001)]["error_code"] == E.INVALID_SESSION_TIMEOUT
    assert h.answers[h.join(session=6_000)]["error_code"] == E.MEMBER_ID_REQUIRED
    assert h.answers[h.join(session=1_800_000)]["error_code"] == E.MEMBER_ID_REQUIRED  # both bounds allowed
    assert h.answers[h.join(group="")]["error_code"] == E.INVALID_GROUP_ID
    assert h.heartbeat("m", 1, group="") == E.INVALID_GROUP_ID


def test_group_max_size_refuses_new_members() -> None:
    h = Harness(GroupCoordinatorConfig(group_max_size=2, offsets_topic_num_partitions=4))
    h.form_group(2)
    assert h.answers[h.join()]["error_code"] == E.GROUP_MAX_SIZE_REACHED
    assert len(h.c.group("g").members) == 2


def test_while_preparing_group_max_size_counts_members_awaiting_and_ids_handed_out() -> None:
    """Kafka's acceptJoiningMember in PreparingRebalance: members already awaiting a join, and ids
    handed out but not yet used, fill the group; the one that would go over is refused."""
    h = Harness(GroupCoordinatorConfig(group_max_size=3, offsets_topic_num_partitions=4))
    joins = []
    for _ in range(3):
        member = h.new_member()  # while preparing, an id is handed out only if there is room
        joins.append(h.join(member_id=member))  # its own pending id does not count against it
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert h.answers[h.join()]["error_code"] == E.GROUP_MAX_SIZE_REACHED  # a fourth, at exactly the limit
    while joins[0] not in h.answers:  # the initial delay, stretched by each arrival
        h.advance(3_000)
    assert [h.answers[rid]["error_code"] for rid in joins] == [0, 0, 0]
    assert len(h.c.group("g").members) == 3


def test_a_retried_join_of_an_awaiting_member_is_never_counted_against_the_limit() -> None:
    """Preparing at the limit (one member awaiting, one id handed out): the awaiting member's retry
    is its own join again, accepted; counted as a newcomer it would be refused and removed."""
    h = Harness(GroupCoordinatorConfig(group_max_size=2, offsets_topic_num_partitions=4))
    (a, _b), _gen = h.form_group(2)
    h.join(member_id=a)  # a rebalance: a awaits
    h.new_member()  # an id handed out: awaiting + pending is the limit now
    retry = h.join(member_id=a)
    assert retry not in h.answers or h.answers[retry]["error_code"] != E.GROUP_MAX_SIZE_REACHED
    assert a in h.c.group("g").members


def test_an_unknown_member_id_in_an_existing_group_is_refused() -> None:
    h = Harness()
    h.form_group(1)
    assert h.answers[h.join(member_id="made-up")]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_a_rebalance_timeout_of_one_millisecond_is_accepted() -> None:
    h = no_delay()
    assert h.answers[h.join(rebalance=1)]["error_code"] == E.MEMBER_ID_REQUIRED
    assert h.answers[h.join(rebalance=0)]["error_code"] == E.INVALID_REQUEST


def test_an_id_handed_out_while_preparing_holds_a_place_until_it_is_used() -> None:
    h = Harness(GroupCoordinatorConfig(group_max_size=2, offsets_topic_num_partitions=4))
    first = h.new_member()
    h.join(member_id=first)
    second = h.new_member()  # handed out, not yet used: one awaiting + one pending is the limit
    assert h.answers[h.join()]["error_code"] == E.GROUP_MAX_SIZE_REACHED
    rid = h.join(member_id=second)
    while rid not in h.answers:  # the initial delay, stretched by the second arrival
        h.advance(3_000)
    assert h.answers[rid]["error_code"] == 0 and len(h.c.group("g").members) == 2


def test_a_retried_join_supersedes_the_earlier_one_which_is_still_answered() -> None:
    h = Harness()
    (a, b), _gen = h.form_group(2)
    first = h.join(member_id=a)
    second = h.join(member_id=a)
    assert h.answers[first]["error_code"] == E.REBALANCE_IN_PROGRESS
    h.join(member_id=b)
    assert h.answers[second]["error_code"] == 0


def test_an_unknown_member_id_for_an_unknown_group_is_refused() -> None:
    h = Harness()
    assert h.answers[h.join(member_id="made-up")]["error_code"] == E.UNKNOWN_MEMBER_ID
    assert h.answers[h.sync("made-up", 1)]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_a_failed_write_of_the_assignment_rebalances_instead_of_handing_it_out() -> None:
    h = Harness(auto_complete=False)
    a, b = h.new_member(), h.new_member()
    ja, _jb = h.join(member_id=a), h.join(member_id=b)
    h.advance(6_000)
    gen = h.answers[ja]["generation_id"]
    sb = h.sync(b, gen)
    sa = h.sync(a, gen, assignments={a: b"1", b: b"2"})
    assert len(h.pending) == 1
    h.sync(a, gen, assignments={a: b"1", b: b"2"})  # a retry while the write is in flight writes nothing more
    assert len(h.pending) == 1
    h.complete_appends(E.NOT_ENOUGH_REPLICAS)
    assert h.answers[sa]["error_code"] == E.REBALANCE_IN_PROGRESS  # superseded by the retry
    assert h.answers[sb]["error_code"] == E.COORDINATOR_NOT_AVAILABLE
    assert h.c.group("g").state is GroupState.PREPARING_REBALANCE
    assert h.c.group("g").members[b].assignment == b""


def test_a_join_or_sync_answer_arrives_only_once_even_when_the_member_is_removed_while_waiting() -> None:
    h = Harness()
    (a, _b), _gen = h.form_group(2)
    h.join(member_id=h.new_member())
    ja = h.join(member_id=a)
    h.leave(a)
    assert h.answers[ja]["error_code"] == E.UNKNOWN_MEMBER_ID


def test_next_deadline_is_the_earliest_session_or_rebalance_deadline() -> None:
    h = Harness()
    (_a,), _gen = h.form_group(1)
    assert h.c.next_deadline_ms() == h.now + SESSION


def test_a_group_loaded_by_a_new_coordinator_starts_every_session_at_the_load() -> None:
    # Kafka's onGroupLoaded: the new coordinator cannot know when the old one last heard from a member, so a
    # member silent since before the move is expired a full session after the load, not after its last
    # heartbeat. Each move during a stall restarts the clock (docs/jepsen.md, the groups workload, seed 8).
    old = Harness()
    ids, _generation = old.form_group(2)
    old.advance(SESSION - 1_000)  # silent for most of a session on the old coordinator
    partition = old.c.partition_for("g")
    new = Harness(load=False, now=old.now)
    new.apply(new.c.complete_loading(partition, list(old.log[partition]), new.now))
    new.advance(SESSION - 1)
    group = new.c.group("g")
    assert group is not None and set(group.members) == set(ids)
    new.advance(1)
    assert not group.members
