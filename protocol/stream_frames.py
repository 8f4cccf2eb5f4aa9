"""The RPC stream's wire format: its HTTP upgrade, and size-prefixed frames after it (sans-I/O).

Design notes: docs/protocol.md, section "protocol/stream_frames.py".
"""

from __future__ import annotations

from collections.abc import Mapping

from kraftpy.protocol.errors import ErrorCode, KafkaError

# The Upgrade token a client asks for and a server names in its 101 answer.
UPGRADE = "kraftpy-frames/1"
FRAME_HEADER_BYTES = 4
# A frame of no bytes: the server's ping when a stream has been quiet, and the client's pong.
EMPTY_FRAME = bytes(FRAME_HEADER_BYTES)
# An upgrade answer's head (status line and headers) is small; one larger is not an answer of ours.
MAX_RESPONSE_HEAD_BYTES = 16 * 1024


def frame(payload: bytes) -> bytes:
    """One frame: the payload's size (4 bytes, big-endian) and the payload."""
    return len(payload).to_bytes(FRAME_HEADER_BYTES, "big") + payload


class FrameSplitter:
    """Cuts a byte stream into frames' payloads, refusing any frame over `max_frame_bytes`.

    A frame's size is checked when its header arrives, before its payload is buffered, so a peer
    can make one connection hold at most one frame of the bound plus what one read brings."""

    __slots__ = ("_buffer", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads `data` completes, in order (an empty payload is a ping or pong).

        Raises INVALID_REQUEST for a frame over the bound; the stream is then unusable."""
        buffer = self._buffer
        if not buffer and len(data) >= FRAME_HEADER_BYTES:
            size = int.from_bytes(data[:FRAME_HEADER_BYTES], "big")
            if len(data) == FRAME_HEADER_BYTES + size and size <= self.max_frame_bytes:
                return [data[FRAME_HEADER_BYTES:]]  # the common case: one read, one whole frame
        buffer += data
        payloads: list[bytes] = []
        start = 0
        while len(buffer) - start >= FRAME_HEADER_BYTES:
            size = int.from_bytes(buffer[start : start + FRAME_HEADER_BYTES], "big")
            if size > self.max_frame_bytes:
                raise KafkaError(
                    f"stream frame of {size} bytes is over the limit of {self.max_frame_bytes}",
                    ErrorCode.INVALID_REQUEST,
                )
            end = start + FRAME_HEADER_BYTES + size
            if len(buffer) < end:
                break
            with memoryview(buffer) as view:  # one copy of the payload, not two
                payloads.append(bytes(view[start + FRAME_HEADER_BYTES : end]))
            start = end
        if start:
            del buffer[:start]
        return payloads

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    @property
    def pending_frame_bytes(self) -> int | None:
        """The size of the frame whose header has arrived and whose payload has not, if any."""
        if len(self._buffer) < FRAME_HEADER_BYTES:
            return None
        return int.from_bytes(self._buffer[:FRAME_HEADER_BYTES], "big")


def upgrade_request(path: str, headers: Mapping[str, str]) -> bytes:
    """The HTTP/1.1 request a client opens its stream with (`headers` include Host)."""
    lines = [f"GET {path} HTTP/1.1", "Connection: Upgrade", f"Upgrade: {UPGRADE}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def split_response_head(data: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """The upgrade answer's status, its headers (names lower-cased) and the bytes after its head,
    or None while the head is incomplete. Raises NETWORK_EXCEPTION for a head that is not HTTP
    or is over MAX_RESPONSE_HEAD_BYTES."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        if len(data) > MAX_RESPONSE_HEAD_BYTES:
            raise KafkaError(
                f"stream upgrade answer head is over {MAX_RESPONSE_HEAD_BYTES} bytes", ErrorCode.NETWORK_EXCEPTION
            )
        return None
    lines = data[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise KafkaError(f"stream upgrade answer is not HTTP: {lines[0][:80]!r}", ErrorCode.NETWORK_EXCEPTION)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers, data[end + 4 :]
