"""StickyAssignor and the algorithm it shares with the cooperative one (Kafka's AbstractStickyAssignor, KIP-54).

Design notes: docs/client.md, section "client/group/assignors/sticky.py".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import cbor2

from kraftpy.client.group.assignors.base import PartitionAssignor, sorted_members, subscribed_partitions, to_assignments
from kraftpy.protocol.consumer_protocol import DEFAULT_GENERATION, Assignment, Subscription
from kraftpy.protocol.types import TopicPartition

USER_DATA_VERSION = 1


@dataclass(frozen=True, slots=True)
class MemberData:
    """What a member says it held before this rebalance."""

    partitions: tuple[TopicPartition, ...]
    generation: int = DEFAULT_GENERATION


def valid_previous_owners(
    claims: Mapping[str, MemberData],
    partitions: set[TopicPartition],
    subscriptions: Mapping[str, Subscription],
) -> dict[TopicPartition, str]:
    """Each partition's rightful previous owner: the highest-generation claim, if exactly one."""
    best: dict[TopicPartition, tuple[int, list[str]]] = {}
    for member, data in claims.items():
        topics = set(subscriptions[member].topics)
        for tp in set(data.partitions):
            if tp not in partitions or tp.topic not in topics:
                continue
            generation, owners = best.get(tp, (data.generation - 1, []))
            if data.generation > generation:
                best[tp] = (data.generation, [member])
            elif data.generation == generation:
                owners.append(member)
    return {tp: owners[0] for tp, (_, owners) in best.items() if len(owners) == 1}


def sticky_assign(
    partitions_per_topic: Mapping[str, int],
    subscriptions: Mapping[str, Subscription],
    claims: Mapping[str, MemberData],
) -> dict[str, list[TopicPartition]]:
    members = sorted_members(subscriptions)
    all_partitions = subscribed_partitions(partitions_per_topic, subscriptions)
    owners = valid_previous_owners(claims, set(all_partitions), subscriptions)
    owned: dict[str, list[TopicPartition]] = {m: [] for m in members}
    for tp in all_partitions:
        if tp in owners:
            owned[owners[tp]].append(tp)
    topic_sets = {frozenset(t for t in subscriptions[m].topics if t in partitions_per_topic) for m in members}
    if len(topic_sets) <= 1:
        out = _constrained(members, all_partitions, owned)
    else:
        out = _general(members, all_partitions, owned, subscriptions)
    return {m: sorted(tps) for m, tps in out.items()}


def _constrained(
    members: list[str], partitions: list[TopicPartition], owned: dict[str, list[TopicPartition]]
) -> dict[str, list[TopicPartition]]:
    out: dict[str, list[TopicPartition]] = {m: [] for m in members}
    if not members:
        return out
    min_quota, extra = divmod(len(partitions), len(members))
    # The extra slots go to those who own the most: that keeps the most partitions in place.
    by_owned = sorted(members, key=lambda m: (-len(owned[m]), members.index(m)))
    quota = {m: min_quota + (1 if i < extra else 0) for i, m in enumerate(by_owned)}
    taken: set[TopicPartition] = set()
    for member in members:
        keep = owned[member][: quota[member]]
        out[member].extend(keep)
        taken.update(keep)
    free = [tp for tp in partitions if tp not in taken]
    for member in members:
        need = quota[member] - len(out[member])
        out[member].extend(free[:need])
        del free[:need]
    assert not free, "quotas add up to the partition count"
    return out


def _general(
    members: list[str],
    partitions: list[TopicPartition],
    owned: dict[str, list[TopicPartition]],
    subscriptions: Mapping[str, Subscription],
) -> dict[str, list[TopicPartition]]:
    order = {m: i for i, m in enumerate(members)}
    candidates = {tp: [m for m in members if tp.topic in subscriptions[m].topics] for tp in partitions}
    out: dict[str, set[TopicPartition]] = {m: set(owned[m]) for m in members}
    kept = {tp for m in members for tp in owned[m]}
    free = sorted((tp for tp in partitions if tp not in kept), key=lambda tp: (len(candidates[tp]), tp))
    for tp in free:
        target = min(candidates[tp], key=lambda m: (len(out[m]), order[m]))
        out[target].add(tp)
    previous = {tp: m for m in members for tp in owned[m]}
    while _move_one(members, out, candidates, previous, order):
        pass
    _give_back(out, previous)
    return {m: sorted(out[m]) for m in members}


def _give_back(out: dict[str, set[TopicPartition]], previous: dict[TopicPartition, str]) -> None:
    """Return each claim to its owner while the member holding it is more loaded than the owner.

    Balancing moves partitions off the most loaded members first, so a claim can go to a member
    that later fills up with free partitions: the owner ends lighter than the member holding its
    claim. Moving it back swaps their loads (the spread stays the same) and keeps one more claim;
    each move keeps one more, so this ends."""
    holder = {tp: m for m, tps in out.items() for tp in tps}
    claims = sorted(previous.items())
    moved = True
    while moved:
        moved = False
        for tp, owner in claims:
            taker = holder[tp]
            if taker != owner and len(out[taker]) > len(out[owner]):
                out[taker].remove(tp)
                out[owner].add(tp)
                holder[tp] = owner
                moved = True
                break  # loads changed: look again from the first claim


def _move_one(
    members: list[str],
    out: dict[str, set[TopicPartition]],
    candidates: dict[TopicPartition, list[str]],
    previous: dict[TopicPartition, str],
    order: dict[str, int],
) -> bool:
    """Move one partition from a member to a candidate holding at least two fewer; False when none can move."""
    loaded = sorted(members, key=lambda m: (-len(out[m]), order[m]))
    light = sorted(members, key=lambda m: (len(out[m]), order[m]))
    for donor in loaded:
        for taker in light:
            if len(out[donor]) - len(out[taker]) < 2:
                break
            movable = [tp for tp in out[donor] if taker in candidates[tp]]
            if movable:
                # Move a partition the donor did not own before if there is one: its claims stay put.
                tp = min(movable, key=lambda tp: (previous.get(tp) == donor, tp))
                out[donor].remove(tp)
                out[taker].add(tp)
                return True
    return False


def encode_user_data(partitions: tuple[TopicPartition, ...], generation: int) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for tp in partitions:
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    body = {
        "version": USER_DATA_VERSION,
        "partitions": [[t, sorted(ps)] for t, ps in sorted(by_topic.items())],
        "generation": generation,
    }
    return cbor2.dumps(body, canonical=True)


def decode_user_data(data: bytes | None) -> MemberData:
    """The StickyAssignor's user data; anything unreadable counts as no claim (a fresh member)."""
    if not data:
        return MemberData(())
    try:
        body = cbor2.loads(data)
        partitions = tuple(
            TopicPartition(topic, p)
            for topic, parts in body["partitions"]
            for p in parts
            if isinstance(topic, str) and type(p) is int and p >= 0
        )
        generation = body.get("generation", DEFAULT_GENERATION)
        return MemberData(partitions, generation if type(generation) is int else DEFAULT_GENERATION)
    except (ValueError, TypeError, KeyError, AttributeError, cbor2.CBORDecodeError):
        return MemberData(())


class StickyAssignor(PartitionAssignor):
    """Eager sticky: remembers its partitions in its user data, since eager members revoke all before joining."""

    name = "sticky"

    def __init__(self) -> None:
        self._partitions: tuple[TopicPartition, ...] | None = None
        self._generation = DEFAULT_GENERATION

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        if self._partitions is None:
            return None
        return encode_user_data(self._partitions, self._generation)

    def on_assignment(self, assignment: Assignment, generation_id: int) -> None:
        self._partitions = assignment.partitions
        self._generation = generation_id

    def member_data(self, subscription: Subscription) -> MemberData:
        return decode_user_data(subscription.user_data)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        claims = {m: self.member_data(s) for m, s in subscriptions.items()}
        return to_assignments(sticky_assign(partitions_per_topic, subscriptions, claims))
