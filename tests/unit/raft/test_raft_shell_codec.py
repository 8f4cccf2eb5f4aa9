"""The Raft wire codec and routes: every message round-trips through CBOR; malformed, foreign or
misaddressed requests get an error answer from a live node, which keeps serving."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import cbor2
import pytest
from aiohttp import web

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.raft import codec
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import Entry, EntryKind, OffsetAndEpoch
from kraftpy.raft.messages import (
    BeginQuorumEpochRequest,
    BeginQuorumEpochResponse,
    EndQuorumEpochRequest,
    EndQuorumEpochResponse,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    VoteRequest,
    VoteResponse,
)
from kraftpy.raft.shell.component import RaftComponent

C = "cluster-a"
REQUESTS = [
    VoteRequest(C, 1, 2, 77, 4, 3, 10, True),
    BeginQuorumEpochRequest(C, 1, 2, 0, 4, 1),
    EndQuorumEpochRequest(C, 1, 2, 0, 4, 1, (3, 2)),
    FetchRequest(C, 2, 1, 78, 4, 10, 3, 500, 6),
    FetchSnapshotRequest(C, 2, 1, 79, 4, OffsetAndEpoch(100, 3), 4096, 65536),
]
RESPONSES = [
    VoteResponse(C, 2, 1, 77, 4, None, True, True),
    BeginQuorumEpochResponse(C, 2, 1, 0, 4, 1),
    EndQuorumEpochResponse(C, 2, 1, 0, 4, 1),
    FetchResponse(
        C,
        1,
        2,
        78,
        4,
        1,
        ErrorCode.NONE,
        10,
        9,
        (Entry(10, 3, b"a"), Entry(11, 4, b"lc", EntryKind.LEADER_CHANGE), Entry(12, 4, b"")),
        leader_round=6,
    ),
    FetchSnapshotResponse(C, 1, 2, 79, 4, 1, ErrorCode.NONE, OffsetAndEpoch(100, 3), 4096, 5000, b"x" * 904),
]


def _wire(message) -> dict:
    return cbor2.loads(cbor2.dumps(codec.encode(message)))


@pytest.mark.parametrize("request_", REQUESTS, ids=lambda m: type(m).__name__)
def test_requests_round_trip_on_their_route(request_) -> None:
    assert codec.decode_request(codec.route_of(request_), _wire(request_)) == request_


@pytest.mark.parametrize(("request_", "response"), list(zip(REQUESTS, RESPONSES, strict=True)))
def test_responses_round_trip_against_their_request(request_, response) -> None:
    assert codec.decode_response(request_, _wire(response)) == response


def _invalid(call) -> str:
    with pytest.raises(KafkaError) as info:
        call()
    assert info.value.code is ErrorCode.INVALID_REQUEST
    return str(info.value)


@pytest.mark.parametrize(
    "body",
    [
        "not a map",
        {},
        {"type": "VoteRequest"},
        {"type": "NoSuchMessage", "cluster_id": C},
        {**codec.encode(REQUESTS[0]), "candidate_epoch": "4"},
        {**codec.encode(REQUESTS[0]), "candidate_epoch": -4},
        {**codec.encode(REQUESTS[0]), "candidate_epoch": 0},
        {**codec.encode(REQUESTS[0]), "end_offset": 1 << 70},
        {**codec.encode(REQUESTS[0]), "dst": 1},  # to itself
        {**codec.encode(REQUESTS[0]), "pre_vote": 1},
        codec.encode(REQUESTS[3]),  # a fetch on the vote route
    ],
)
def test_malformed_requests_are_invalid(body) -> None:
    _invalid(lambda: codec.decode_request("/raft/vote", body))


def test_unknown_route_is_invalid() -> None:
    _invalid(lambda: codec.decode_request("/raft/nothing", codec.encode(REQUESTS[0])))


def test_responses_must_answer_their_request() -> None:
    fetch, answer = REQUESTS[3], RESPONSES[3]
    _invalid(lambda: codec.decode_response(fetch, _wire(dataclasses.replace(answer, correlation_id=1))))
    _invalid(lambda: codec.decode_response(fetch, _wire(dataclasses.replace(answer, src=3))))
    _invalid(lambda: codec.decode_response(fetch, _wire(RESPONSES[0])))


@pytest.mark.parametrize(
    "entries",
    [
        (Entry(11, 4, b"gap"),),  # does not start at the fetch offset
        (Entry(10, 4, b"a"), Entry(12, 4, b"b")),  # not contiguous
        (Entry(10, 4, b"a"), Entry(11, 3, b"b")),  # epoch going back
        (Entry(10, 5, b"a"),),  # above the leader's epoch
    ],
)
def test_fetched_entries_must_continue_the_log(entries) -> None:
    bad = dataclasses.replace(RESPONSES[3], entries=entries)
    _invalid(lambda: codec.decode_response(REQUESTS[3], _wire(bad)))


@pytest.mark.parametrize(("position", "size", "data"), [(4096, 4100, b"x" * 5), (4096, 5000, b""), (6000, 5000, b"")])
def test_snapshot_chunks_must_lie_inside_the_snapshot(position: int, size: int, data: bytes) -> None:
    bad = dataclasses.replace(RESPONSES[4], position=position, size=size, data=data)
    _invalid(lambda: codec.decode_response(REQUESTS[4], _wire(bad)))


# ---- a live node's routes ---------------------------------------------------------------------


async def test_a_live_node_answers_bad_requests_with_errors_and_keeps_serving(
    tmp_path: Path, reserve_ports: Callable[[int], list[int]]
) -> None:
    (port,) = reserve_ports(1)
    config = RaftConfig(election_timeout_ms=50, fetch_timeout_ms=100, fetch_max_wait_ms=20, request_timeout_ms=500)
    component = RaftComponent(
        node_id=1, cluster_id=C, data_dir=tmp_path, voters={1: ("127.0.0.1", port)}, config=config, rpc=RpcClient()
    )
    runner = web.AppRunner(make_app(component.routes()))
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    client = RpcClient(request_timeout_ms=2000)
    address = ("127.0.0.1", port)
    try:
        stopped = await client.call(address, "/raft/vote", codec.encode(REQUESTS[0]), raise_errors=False)
        assert stopped["error_code"] == ErrorCode.BROKER_NOT_AVAILABLE  # not started yet
        await component.start()
        vote = dataclasses.replace(REQUESTS[0], src=2, dst=1)
        cases = [
            ("/raft/vote", b"\xff\x00garbage", ErrorCode.INVALID_REQUEST),
            ("/raft/vote", cbor2.dumps([1, 2, 3]), ErrorCode.INVALID_REQUEST),
            ("/raft/vote", cbor2.dumps(codec.encode(dataclasses.replace(vote, cluster_id="other"))), 104),
            ("/raft/vote", cbor2.dumps(codec.encode(dataclasses.replace(vote, dst=7))), ErrorCode.INVALID_REQUEST),
            ("/raft/fetch", cbor2.dumps(codec.encode(vote)), ErrorCode.INVALID_REQUEST),
            ("/raft/unknown", cbor2.dumps(codec.encode(vote)), ErrorCode.INVALID_REQUEST),
        ]
        session = client._get_session()
        for path, raw, code in cases:
            async with session.post(f"http://127.0.0.1:{port}{path}", data=raw) as resp:
                body = cbor2.loads(await resp.read())
            assert body["error_code"] == code, (path, body)
        # a well-formed vote from a node outside the voter set gets the core's answer
        answer = await client.call(address, "/raft/vote", codec.encode(vote))
        assert answer["type"] == "VoteResponse" and answer["error"] == ErrorCode.INCONSISTENT_VOTER_SET
        assert component.status()["state"] in ("leader", "prospective", "candidate", "unattached")
    finally:
        await component.stop(graceful=False)
        await client.close()
        await runner.cleanup()
