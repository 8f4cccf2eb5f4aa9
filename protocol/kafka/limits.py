"""The bounds of a Kafka listener (Kafka's socket.request.max.bytes, queued.max.request.bytes, ...)."""

from __future__ import annotations

from dataclasses import dataclass

from kraftpy.protocol.errors import ErrorCode, KafkaError


@dataclass(frozen=True, slots=True)
class KafkaListenerLimits:
    """Kafka's names and defaults, except the bounds Kafka does without (noted)."""

    socket_request_max_bytes: int = 104_857_600
    # Kafka's default -1 is unbounded; 256 MiB keeps a burst of large frames from taking the memory.
    queued_max_request_bytes: int = 256 * 1024 * 1024
    # Not Kafka's (it sends fetched records from the file and holds none): the bytes of large answers
    # (Fetch records) all connections hold from the read until written (protocol/shell/answer_budget.py).
    queued_max_response_bytes: int = 256 * 1024 * 1024
    # The kernel's buffers of each connection (SO_SNDBUF, SO_RCVBUF); -1: the OS's default, which
    # autotunes up to net.ipv4.tcp_wmem / tcp_rmem's maximum (4 and 32 MiB on the machine we measure on).
    socket_send_buffer_bytes: int = 102_400
    socket_receive_buffer_bytes: int = 102_400
    max_connections: int = 1000
    connections_max_idle_ms: int = 600_000
    # Kafka reads one request of a connection at a time; clients pipeline up to 5 (idempotent producers).
    max_in_flight_requests: int = 16
    # Listeners of the process that share its descriptors (the RPC port and every Kafka listener):
    # together, full, they leave the node's own files room (protocol/shell/rpc_limits.py).
    listeners_sharing_fds: int = 1

    def __post_init__(self) -> None:
        # The one place these rules live: a node's config check (node/config.py) builds the limits.
        if self.socket_request_max_bytes < 1024:
            raise ValueError(f"socket_request_max_bytes must be >= 1024, got {self.socket_request_max_bytes}")
        if self.queued_max_request_bytes < self.socket_request_max_bytes:
            raise ValueError(
                f"queued_max_request_bytes must be >= socket_request_max_bytes ({self.socket_request_max_bytes}), "
                f"got {self.queued_max_request_bytes}"
            )
        if self.queued_max_response_bytes < 1024:
            raise ValueError(f"queued_max_response_bytes must be >= 1024, got {self.queued_max_response_bytes}")
        for name in ("socket_send_buffer_bytes", "socket_receive_buffer_bytes"):
            if not socket_buffer_ok(getattr(self, name)):
                raise ValueError(f"{name} must be -1 (the OS's default) or >= 1024, got {getattr(self, name)}")


def socket_buffer_ok(size: int) -> bool:
    """A socket buffer setting: -1 (the OS's default) or at least 1024 bytes."""
    return size == -1 or size >= 1024


def check_frame_size(size: int, max_bytes: int) -> None:
    """A request frame's size prefix, refused when negative, empty or above `max_bytes`."""
    if size <= 0:
        raise KafkaError(f"a request frame of {size} bytes is not a request", ErrorCode.CORRUPT_MESSAGE)
    if size > max_bytes:
        raise KafkaError(
            f"a request frame of {size} bytes is larger than socket.request.max.bytes ({max_bytes})",
            ErrorCode.CORRUPT_MESSAGE,
        )
