"""A stand-in shell for the group coordinator (virtual clock, an in-memory log), and tests of the stand-in.

The harness does what a broker shell must: register each request, collect
answers (checking each request is answered exactly once), write appends to a
per-partition log in order and complete them, and tick whenever the next
deadline has passed. Other test_groups_* modules import it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from typing import Any

from kraftpy.broker.groups import Append, GroupCoordinator, GroupCoordinatorConfig, Respond
from kraftpy.broker.groups.records import Record
from kraftpy.protocol.consumer_protocol import Subscription, encode_subscription
from kraftpy.protocol.errors import ErrorCode

SESSION = 10_000
REBALANCE = 30_000


def subscription(*topics: str) -> bytes:
    return encode_subscription(Subscription(tuple(topics)))


def protocols(*names: str, topics: tuple[str, ...] = ("t",)) -> list[dict[str, Any]]:
    return [{"name": n, "metadata": subscription(*topics)} for n in (names or ("range",))]


class Harness:
    def __init__(
        self,
        config: GroupCoordinatorConfig | None = None,
        *,
        seed: int = 0,
        now: int = 0,
        load: bool = True,
        auto_complete: bool = True,
    ) -> None:
        self.config = config or GroupCoordinatorConfig(offsets_topic_num_partitions=4)
        self.c = GroupCoordinator(self.config, rng=random.Random(seed))
        self.now = now
        self.answers: dict[int, dict[str, Any]] = {}
        self.log: dict[int, list[Record]] = {}
        self.pending: list[Append] = []
        self.auto_complete = auto_complete
        # Decides the outcome of each append when auto-completing (default: success).
        self.append_outcome: Callable[[Append], ErrorCode] = lambda append: ErrorCode.NONE
        self._next_rid = 0
        if load:
            for p in range(self.config.offsets_topic_num_partitions):
                self.apply(self.c.complete_loading(p, [], now))

    # --- plumbing -----------------------------------------------------------------------------

    def apply(self, actions: Iterable[Any]) -> None:
        for action in actions:
            if isinstance(action, Respond):
                assert action.request_id not in self.answers, f"request {action.request_id} answered twice"
                self.answers[action.request_id] = action.body
            else:
                assert isinstance(action, Append)
                self.pending.append(action)
        if self.auto_complete:
            self.complete_appends()
        self._tick_due()

    def _tick_due(self) -> None:
        deadline = self.c.next_deadline_ms()
        while deadline is not None and deadline <= self.now:
            self.apply(self.c.tick(self.now))
            deadline = self.c.next_deadline_ms()

    def complete_appends(self, error: ErrorCode | None = None) -> None:
        while self.pending:
            append = self.pending.pop(0)
            code = self.append_outcome(append) if error is None else error
            if code is ErrorCode.NONE:
                self.log.setdefault(append.partition, []).extend(append.records)
            self.apply(self.c.append_completed(append.append_id, code, self.now))

    def send(self, api: str, body: dict[str, Any]) -> int:
        self._next_rid += 1
        rid = self._next_rid
        self.apply(self.c.handle(rid, api, body, self.now))
        return rid

    def call(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """Send and expect an answer right away (after appends completed)."""
        rid = self.send(api, body)
        assert rid in self.answers, f"{api} was not answered yet"
        return self.answers[rid]

    def advance(self, ms: int) -> None:
        """Move the virtual clock, ticking at every deadline on the way (as a shell's timer would)."""
        target = self.now + ms
        deadline = self.c.next_deadline_ms()
        while deadline is not None and deadline <= target:
            self.now = max(self.now, deadline)
            self._tick_due()
            deadline = self.c.next_deadline_ms()
        self.now = target

    def answer(self, rid: int) -> dict[str, Any] | None:
        return self.answers.get(rid)

    # --- group API helpers --------------------------------------------------------------------

    def join(
        self,
        group: str = "g",
        member_id: str = "",
        *,
        instance: str | None = None,
        protos: list[dict[str, Any]] | None = None,
        session: int = SESSION,
        rebalance: int = REBALANCE,
        client_id: str = "c",
        protocol_type: str = "consumer",
    ) -> int:
        body: dict[str, Any] = {
            "group_id": group,
            "member_id": member_id,
            "group_instance_id": instance,
            "session_timeout_ms": session,
            "rebalance_timeout_ms": rebalance,
            "protocol_type": protocol_type,
            "protocols": protos if protos is not None else protocols(),
            "client_id": client_id,
        }
        return self.send("join_group", body)

    def new_member(self, group: str = "g", **kwargs: Any) -> str:
        """A dynamic member's first round trip: MEMBER_ID_REQUIRED hands out its id."""
        answer = self.answers[self.join(group, **kwargs)]
        assert answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED, answer
        return answer["member_id"]

    def sync(
        self,
        member_id: str,
        generation: int,
        group: str = "g",
        assignments: dict[str, bytes] | None = None,
        instance: str | None = None,
    ) -> int:
        body = {
            "group_id": group,
            "member_id": member_id,
            "generation_id": generation,
            "group_instance_id": instance,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        }
        return self.send("sync_group", body)

    def heartbeat(self, member_id: str, generation: int, group: str = "g", instance: str | None = None) -> int:
        body = {"group_id": group, "member_id": member_id, "generation_id": generation, "group_instance_id": instance}
        return self.answers[self.send("heartbeat", body)]["error_code"]

    def leave(self, *member_ids: str, group: str = "g") -> dict[str, Any]:
        return self.call("leave_group", {"group_id": group, "members": [{"member_id": m} for m in member_ids]})

    def commit(
        self,
        offsets: dict[tuple[str, int], int],
        group: str = "g",
        member_id: str = "",
        generation: int = -1,
        metadata: str = "",
        instance: str | None = None,
    ) -> int:
        topics: dict[str, list[dict[str, Any]]] = {}
        for (topic, partition), offset in offsets.items():
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "committed_offset": offset, "committed_metadata": metadata}
            )
        body = {
            "group_id": group,
            "member_id": member_id,
            "generation_id": generation,
            "group_instance_id": instance,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        return self.send("offset_commit", body)

    def commit_codes(self, rid: int) -> dict[tuple[str, int], int]:
        body = self.answers[rid]
        return {(t["name"], p["partition_index"]): p["error_code"] for t in body["topics"] for p in t["partitions"]}

    def fetch(self, group: str = "g", partitions: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], int]:
        body: dict[str, Any] = {"group_id": group}
        if partitions is not None:
            by_topic: dict[str, list[int]] = {}
            for t, p in partitions:
                by_topic.setdefault(t, []).append(p)
            body["topics"] = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
        answer = self.call("offset_fetch", body)
        assert answer["error_code"] == 0, answer
        return {
            (t["name"], p["partition_index"]): p["committed_offset"] for t in answer["topics"] for p in t["partitions"]
        }

    def form_group(self, n: int, group: str = "g", **kwargs: Any) -> tuple[list[str], int]:
        """n dynamic members joined and synced (the first is the leader); returns (member ids, generation)."""
        ids = [self.new_member(group, **kwargs) for _ in range(n)]
        rids = [self.join(group, mid, **kwargs) for mid in ids]
        # The initial delay stretches while members keep arriving; wait it out.
        while rids[0] not in self.answers:
            self.advance(max(1, self.config.group_initial_rebalance_delay_ms))
        answers = [self.answers[r] for r in rids]
        assert all(a["error_code"] == 0 for a in answers), answers
        generation = answers[0]["generation_id"]
        leader = answers[0]["leader"]
        syncs = [
            self.sync(mid, generation, group, {m: m.encode() for m in ids} if mid == leader else None) for mid in ids
        ]
        assert all(self.answers[r]["error_code"] == 0 for r in syncs)
        return ids, generation


def test_the_harness_answers_every_request_once_and_logs_appends_in_order() -> None:
    h = Harness()
    ids, generation = h.form_group(2)
    assert generation == 1 and len(ids) == 2
    partition = h.c.partition_for("g")
    assert len(h.log[partition]) == 1  # the leader's assignment
    rid = h.commit({("t", 0): 5}, member_id=ids[0], generation=generation)
    assert h.commit_codes(rid) == {("t", 0): 0}
    assert len(h.log[partition]) == 2


def test_the_harness_ticks_when_the_deadline_passes() -> None:
    h = Harness()
    _ids, _generation = h.form_group(1)
    h.advance(SESSION - 1)
    assert h.c.group("g").members
    h.advance(1)
    assert not h.c.group("g").members
