"""The durable election state (epoch, voted-for, leader) and the roles a node can be in.

`QuorumState` is what the quorum-state file holds. The core emits
`PersistQuorumState` whenever any field changes, before any message that
depends on it; the shell writes it atomically and fsyncs it before it performs
the next action. On restart the shell reads it back and hands it to the core.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Role(enum.StrEnum):
    UNATTACHED = "unattached"  # knows the epoch, no leader yet (may have voted)
    FOLLOWER = "follower"  # knows the leader of its epoch and fetches from it
    PROSPECTIVE = "prospective"  # running a pre-vote, epoch not bumped
    CANDIDATE = "candidate"  # bumped the epoch, voted for itself, asking for votes
    LEADER = "leader"
    RESIGNED = "resigned"  # was leader of this epoch; never leads it again


@dataclass(frozen=True, slots=True)
class QuorumState:
    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "voted_for": self.voted_for, "leader_id": self.leader_id}

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> QuorumState:
        return cls(int(body["epoch"]), body.get("voted_for"), body.get("leader_id"))
