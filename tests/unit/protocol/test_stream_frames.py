"""The RPC stream's wire format (protocol/stream_frames.py), with no I/O: frames cut the same however
the bytes are split across reads, a frame over the bound refused from its header alone, and the
upgrade answer's head read only when whole and only when it is HTTP."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.stream_frames import (
    EMPTY_FRAME,
    MAX_RESPONSE_HEAD_BYTES,
    UPGRADE,
    FrameSplitter,
    frame,
    split_response_head,
    upgrade_request,
)


@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(min_value=0, max_value=4000), max_size=20),
)
def test_frames_come_out_whole_and_in_order_however_the_reads_split_them(payloads, cuts) -> None:
    wire = b"".join(frame(p) for p in payloads)
    splitter = FrameSplitter(max_frame_bytes=300)
    out: list[bytes] = []
    start = 0
    for cut in [*sorted({c for c in cuts if c < len(wire)}), len(wire)]:
        out += splitter.feed(wire[start:cut])
        start = cut
    assert out == payloads
    assert splitter.buffered_bytes == 0


def test_a_frame_over_the_bound_is_refused_from_its_header_before_its_payload_arrives() -> None:
    splitter = FrameSplitter(max_frame_bytes=1024)
    assert splitter.feed(frame(b"ok")) == [b"ok"]
    with pytest.raises(KafkaError) as info:
        splitter.feed((1025).to_bytes(4, "big"))  # the header alone
    assert info.value.code is ErrorCode.INVALID_REQUEST
    assert "stream frame of 1025 bytes is over the limit of 1024" in info.value.message


def test_a_frame_at_the_bound_and_an_empty_frame_pass() -> None:
    splitter = FrameSplitter(max_frame_bytes=8)
    assert splitter.feed(frame(b"12345678") + EMPTY_FRAME) == [b"12345678", b""]


def test_the_upgrade_request_names_the_stream_and_its_headers() -> None:
    request = upgrade_request("/rpc/stream", {"Host": "127.0.0.1:9", "Authorization": "sig"})
    lines = request.decode().split("\r\n")
    assert lines[0] == "GET /rpc/stream HTTP/1.1"
    assert {"Connection: Upgrade", f"Upgrade: {UPGRADE}", "Host: 127.0.0.1:9", "Authorization: sig"} <= set(lines)
    assert request.endswith(b"\r\n\r\n")


def test_the_upgrade_answer_is_read_when_its_head_is_whole() -> None:
    answer = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nX-Kraftpy-Auth-Proof:  p1 \r\n\r\n"
    assert split_response_head(answer[:-1]) is None
    status, headers, rest = split_response_head(answer + frame(b"a"))
    assert status == 101 and headers["x-kraftpy-auth-proof"] == "p1" and rest == frame(b"a")


@pytest.mark.parametrize(
    ("head", "expect"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "is not HTTP"),
        (b"HTTP/1.1 abc\r\n\r\n", "is not HTTP"),
        (b"x" * (MAX_RESPONSE_HEAD_BYTES + 1), f"over {MAX_RESPONSE_HEAD_BYTES} bytes"),
    ],
)
def test_an_upgrade_answer_that_is_not_ours_is_refused(head: bytes, expect: str) -> None:
    with pytest.raises(KafkaError) as info:
        split_response_head(head)
    assert info.value.code is ErrorCode.NETWORK_EXCEPTION and expect in info.value.message
