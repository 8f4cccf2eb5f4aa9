"""Timeouts and limits of the Raft core, with KRaft's defaults and units in the names.

Every wait the core has is bounded by one of these (DESIGN.md principle 6).
The shell builds one `RaftConfig` from the node's configuration file; the
simulator builds its own, usually with the defaults.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RaftConfig:
    # quorum.election.timeout.ms: a voter without a leader starts an election after a
    # timeout drawn uniformly from [election_timeout_ms, 2 * election_timeout_ms).
    election_timeout_ms: int = 1000
    # quorum.election.backoff.max.ms: upper bound of the randomized wait after a lost election.
    election_backoff_max_ms: int = 1000
    # quorum.fetch.timeout.ms: a follower that has not heard from its leader for this long
    # starts a pre-vote; a leader not fetched from by a majority for 1.5x this resigns.
    fetch_timeout_ms: int = 2000
    check_quorum_factor: float = 1.5
    # Followers wait fetch_timeout_ms plus a random [0, jitter) before their pre-vote, so
    # followers of the same dead leader rarely run at the same moment (split votes).
    fetch_timeout_jitter_ms: int = 100
    # How long the leader parks a fetch that has nothing new before answering it empty.
    fetch_max_wait_ms: int = 500
    # How long the leader holds a parked fetch whose only news is a higher high watermark
    # (no new entries). KRaft answers at once; then every commit costs each follower a second
    # fetch just to learn it. Held this long, the next append usually carries the high watermark
    # along with its entries; followers and observers learn a commit at most this much later
    # when no append follows. 0 answers at once, as KRaft.
    fetch_high_watermark_linger_ms: int = 5
    # quorum.request.timeout.ms: an unanswered request is sent again after this long
    # (for a fetch: on top of the fetch's own max wait).
    request_timeout_ms: int = 2000
    # quorum.retry.backoff.ms: the pause before retrying after an error answer.
    retry_backoff_ms: int = 20
    # quorum.append.linger.ms: how long proposals accumulate before they are appended.
    append_linger_ms: int = 0
    max_batch_bytes: int = 1024 * 1024
    # Backpressure: the leader refuses proposals (NOT_ENOUGH_REPLICAS, retriable) while this
    # many bytes of its proposals are appended but not committed (a quorum that is slow or gone).
    max_uncommitted_bytes: int = 8 * 1024 * 1024
    max_fetch_bytes: int = 1024 * 1024
    snapshot_chunk_bytes: int = 64 * 1024
    # A proposal or a read not resolved within this time fails with REQUEST_TIMED_OUT.
    proposal_timeout_ms: int = 5000
    read_timeout_ms: int = 5000

    def __post_init__(self) -> None:
        for name in (
            "election_timeout_ms",
            "fetch_timeout_ms",
            "request_timeout_ms",
            "retry_backoff_ms",
            "max_batch_bytes",
            "max_uncommitted_bytes",
            "max_fetch_bytes",
            "snapshot_chunk_bytes",
            "proposal_timeout_ms",
            "read_timeout_ms",
        ):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        for name in (
            "election_backoff_max_ms",
            "fetch_max_wait_ms",
            "fetch_high_watermark_linger_ms",
            "append_linger_ms",
            "fetch_timeout_jitter_ms",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.check_quorum_factor < 1.0:
            raise ValueError("check_quorum_factor must be at least 1.0")

    @property
    def check_quorum_timeout_ms(self) -> int:
        return int(self.fetch_timeout_ms * self.check_quorum_factor)
