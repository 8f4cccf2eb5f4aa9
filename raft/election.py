"""Election rules as pure functions: who may be granted a vote, timeouts with jitter, tallies.

The randomness (election jitter, backoff) comes from an injected seeded
`random.Random`, never from the module-level generator, so a simulation run is
a function of its seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kraftpy.raft.config import RaftConfig


def log_is_up_to_date(candidate_last_epoch: int, candidate_end_offset: int, last_epoch: int, end_offset: int) -> bool:
    """Raft's election restriction: the candidate's log is at least as up to date as ours
    (a larger last epoch wins; with equal last epochs the longer log wins)."""
    return (candidate_last_epoch, candidate_end_offset) >= (last_epoch, end_offset)


def can_grant_prevote(
    *,
    candidate_epoch: int,
    epoch: int,
    log_ok: bool,
    is_leader: bool,
    has_live_leader: bool,
) -> bool:
    """A pre-vote changes no state. It is granted only if the candidate could win a real
    election now: its proposed epoch is newer than ours, its log is up to date, and we
    are not (and have not recently heard from) a live leader."""
    return candidate_epoch > epoch and log_ok and not is_leader and not has_live_leader


def can_grant_vote(
    *,
    candidate_id: int,
    candidate_epoch: int,
    epoch: int,
    voted_for: int | None,
    leader_id: int | None,
    log_ok: bool,
) -> bool:
    """A real vote, evaluated after the voter has moved up to `candidate_epoch`: one vote
    per epoch (or a repeat of the same vote), none once a leader is known for the epoch,
    and only for an up-to-date log."""
    return (
        candidate_epoch == epoch and leader_id is None and (voted_for is None or voted_for == candidate_id) and log_ok
    )


def majority(voter_count: int) -> int:
    return voter_count // 2 + 1


def election_timeout_ms(config: RaftConfig, rng: random.Random) -> int:
    """Uniform in [T, 2T) as KRaft does."""
    return config.election_timeout_ms + rng.randrange(max(1, config.election_timeout_ms))


def election_backoff_ms(config: RaftConfig, rng: random.Random, attempt: int) -> int:
    """Randomized exponential backoff after a lost election, capped at election_backoff_max_ms."""
    cap = min(config.election_backoff_max_ms, config.retry_backoff_ms * (1 << min(attempt, 20)))
    return rng.randrange(max(1, cap)) + 1


def successor_backoff_ms(config: RaftConfig, position: int) -> int:
    """How long a follower waits after EndQuorumEpoch before it runs: the first preferred
    successor at once, the later ones exponentially later (so the best one usually wins)."""
    if position <= 0:
        return 0
    return min(config.election_backoff_max_ms, config.retry_backoff_ms * (1 << min(position, 20)))


@dataclass(slots=True)
class VoteTally:
    """Votes of one election round (pre-vote or real) among a fixed voter set."""

    voters: frozenset[int]
    granted: set[int] = field(default_factory=set)
    rejected: set[int] = field(default_factory=set)

    def record(self, voter: int, granted: bool) -> None:
        if voter not in self.voters or voter in self.granted or voter in self.rejected:
            return
        (self.granted if granted else self.rejected).add(voter)

    @property
    def won(self) -> bool:
        return len(self.granted) >= majority(len(self.voters))

    @property
    def lost(self) -> bool:
        return len(self.rejected) > len(self.voters) - majority(len(self.voters))

    def unanswered(self) -> list[int]:
        return sorted(self.voters - self.granted - self.rejected)
