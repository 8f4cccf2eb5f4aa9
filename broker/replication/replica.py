"""What a leader knows about one follower: Kafka's Replica / ReplicaState.

The leader learns a follower's log end offset only from the follower's fetch
offset, after the fetch passed the epoch and divergence checks, so every LEO
recorded here is a prefix of the leader's own log. `last_caught_up_time_ms`
is the last moment the follower was known to hold everything the leader had;
ISR shrinking compares it with replica_lag_time_max_ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.broker.replication.model import UNKNOWN_BROKER_EPOCH, UNKNOWN_OFFSET


@dataclass(slots=True)
class RemoteReplicaState:
    broker_id: int
    log_end_offset: int = UNKNOWN_OFFSET
    log_start_offset: int = UNKNOWN_OFFSET
    # The leader's LEO when this follower last fetched, and when that was.
    last_fetch_leader_log_end_offset: int = UNKNOWN_OFFSET
    last_fetch_time_ms: int = 0
    last_caught_up_time_ms: int = 0
    broker_epoch: int = UNKNOWN_BROKER_EPOCH

    @classmethod
    def for_new_leader(cls, broker_id: int, in_isr: bool, now_ms: int) -> RemoteReplicaState:
        """Kafka's resetReplicaState(isNewLeader = true).

        The LEO starts unknown, so the high watermark cannot move until this
        follower has fetched from the new leader (and passed the divergence
        check) -- the "up-to-date view" of KIP-101. An ISR member is treated as
        caught up now, so it gets a full replica_lag_time_max_ms to fetch
        before it can be shrunk out.
        """
        return cls(broker_id=broker_id, last_caught_up_time_ms=now_ms if in_isr else 0)

    def update_fetch_state(
        self,
        fetch_offset: int,
        log_start_offset: int,
        fetch_time_ms: int,
        leader_end_offset: int,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
    ) -> None:
        """Kafka's updateFetchState: the follower holds [.., fetch_offset); when was it last caught up?

        If it asked for the leader's LEO it is caught up now. If it asked for
        at least the LEO the leader had at its previous fetch, it was caught up
        at that previous fetch. Otherwise it is still behind and the time stays.
        """
        if fetch_offset >= leader_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, fetch_time_ms)
        elif fetch_offset >= self.last_fetch_leader_log_end_offset:
            self.last_caught_up_time_ms = max(self.last_caught_up_time_ms, self.last_fetch_time_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_log_end_offset = leader_end_offset
        self.last_fetch_time_ms = fetch_time_ms
        if broker_epoch != UNKNOWN_BROKER_EPOCH:
            self.broker_epoch = broker_epoch

    def is_caught_up(self, leader_end_offset: int, now_ms: int, replica_lag_time_max_ms: int) -> bool:
        """Kafka's isCaughtUp: at the leader's LEO now, or caught up within the allowed lag."""
        return (
            self.log_end_offset == leader_end_offset or now_ms - self.last_caught_up_time_ms <= replica_lag_time_max_ms
        )
