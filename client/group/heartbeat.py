"""The member's three clocks (Kafka's Heartbeat): heartbeat interval, session, and poll interval.

heartbeat   send one every heartbeat_interval_ms (one at a time; retry_backoff_ms after a failure)
session     no successful heartbeat answer for session_timeout_ms: the coordinator has surely
            dropped us, so look for it again (the next answer will say UNKNOWN_MEMBER_ID)
poll        the application did not call poll() for max_poll_interval_ms: leave the group so
            the others get its partitions instead of waiting on a stuck consumer
"""

from __future__ import annotations


class Heartbeat:
    def __init__(
        self, *, session_timeout_ms: int, heartbeat_interval_ms: int, max_poll_interval_ms: int, retry_backoff_ms: int
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.in_flight = False
        self._next_heartbeat_ms = 0
        self._session_start_ms = 0
        self._last_poll_ms = 0

    def poll(self, now_ms: int) -> None:
        self._last_poll_ms = now_ms

    def reset_timeouts(self, now_ms: int) -> None:
        """A new generation (or coordinator): the session starts now, the first heartbeat is an interval away."""
        self._session_start_ms = now_ms
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms
        self.in_flight = False

    def sent(self, now_ms: int) -> None:
        self.in_flight = True
        self._next_heartbeat_ms = now_ms + self.heartbeat_interval_ms

    def received(self, now_ms: int) -> None:
        self.in_flight = False
        self._session_start_ms = now_ms

    def failed(self, now_ms: int) -> None:
        self.in_flight = False
        self._next_heartbeat_ms = now_ms + self.retry_backoff_ms

    def should_heartbeat(self, now_ms: int) -> bool:
        return not self.in_flight and now_ms >= self._next_heartbeat_ms

    def session_expired(self, now_ms: int) -> bool:
        return now_ms - self._session_start_ms >= self.session_timeout_ms

    def poll_expired(self, now_ms: int) -> bool:
        return now_ms - self._last_poll_ms >= self.max_poll_interval_ms

    def next_deadline(self) -> int:
        """The earliest of the three clocks' next events."""
        deadlines = [self._session_start_ms + self.session_timeout_ms, self._last_poll_ms + self.max_poll_interval_ms]
        if not self.in_flight:
            deadlines.append(self._next_heartbeat_ms)
        return min(deadlines)
