"""The floor under a one-at-a-time Raft commit on this machine: the commit's messages and fsyncs, no Raft.

Issue 16 asks a leader's commit p50 of 1.0 ms. This measures what the least a pull-based commit
(KRaft's, and ours) must do costs here, with nothing else: three processes on 127.0.0.1, each an
asyncio loop on uvloop as the nodes run, raw `asyncio.Protocol`s and 4-byte length-prefixed frames
(no RPC layer, no codec, no Raft state). One commit at a time:

1. the leader writes a 100-byte entry to its file and starts its fdatasync (in a thread, as the
   nodes' flush thread does; `--leader-fsync inline|none` to compare),
2. answers both followers' parked fetches with the entry,
3. each follower writes it, fdatasyncs in its loop (as a dedicated controller's follower does) and
   sends its next fetch, which acknowledges the entry,
4. the leader commits once its own fsync is done and one follower has acknowledged (a majority of
   three), and proposes the next entry.

Latency is measured in the leader, from the proposal to the commit, as `raft_bench.py` measures
the leader's figure; CPU per commit is each process's user + system time over the run. Whatever
Raft, the RPC stream, the codec and the state machine add sits on top of this. With `--quorum`,
each round is followed by `raft_bench.py`'s one-at-a-time phase on a real 3-voter quorum (started
once, kept between rounds), so the floor and the real commit are measured side by side.

    python benchmarks/raft_floor_bench.py --commits 3000 --rounds 3 --quorum
    python benchmarks/raft_floor_bench.py --leader-fsync none --follower-fsync none   # the messages alone
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import socket
import statistics
import struct
import tempfile
import time
from pathlib import Path

from kraftpy.tools.commands.perf import percentile  # the quorum's figures use the same nearest rank

ENTRY = b"e" * 100
FRAME = struct.Struct(">IQ")  # length of what follows, then the offset the frame is about


def _loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # the nodes run on uvloop; say so rather than measure the other loop quietly
        raise SystemExit("uvloop is not installed: pip install uvloop") from None
    return uvloop.new_event_loop()


class _Frames(asyncio.Protocol):
    """Splits the byte stream into (offset, payload) frames and hands each to `on_frame`."""

    def __init__(self, on_frame) -> None:
        self.buf = bytearray()
        self.on_frame = on_frame
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while len(self.buf) >= 4:
            size = int.from_bytes(self.buf[:4], "big")
            if len(self.buf) < 4 + size:
                return
            offset = int.from_bytes(self.buf[4:12], "big")
            payload = bytes(self.buf[12 : 4 + size])
            del self.buf[: 4 + size]
            self.on_frame(self, offset, payload)

    def send(self, offset: int, payload: bytes = b"") -> None:
        assert self.transport is not None
        self.transport.write(FRAME.pack(8 + len(payload), offset) + payload)


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def follower(port: int, path: str, fsync: str, out: multiprocessing.Queue) -> None:
    loop = _loop()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    cpu_start = [0.0]

    def on_entry(conn: _Frames, offset: int, payload: bytes) -> None:
        if offset == 0 and not payload:  # the leader's "measuring starts" mark
            cpu_start[0] = _cpu_s()
            return
        if offset == 2**64 - 1:  # the leader's stop
            out.put(_cpu_s() - cpu_start[0])
            loop.stop()
            return
        os.write(fd, payload)
        if fsync == "inline":
            os.fdatasync(fd)
        conn.send(offset + 1)  # the next fetch: everything before offset + 1 is on disk

    async def main() -> None:
        _, proto = await loop.create_connection(lambda: _Frames(on_entry), "127.0.0.1", port)
        proto.send(0)

    loop.create_task(main())
    loop.run_forever()
    os.close(fd)


def leader(commits: int, path: str, fsync: str, port_out: multiprocessing.Queue, out: multiprocessing.Queue) -> None:
    loop = _loop()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    port_out.put(sock.getsockname()[1])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    followers: list[_Frames] = []
    parked: dict[_Frames, int] = {}  # a follower's fetch waiting for the next entry
    acked: dict[_Frames, int] = {}
    latencies_us: list[float] = []
    state = {"offset": 0, "written": -1, "flushed": -1, "started": 0.0, "cpu": 0.0, "warm": 200}
    all_connected = loop.create_future()

    def flushed(offset: int) -> None:
        state["flushed"] = offset
        maybe_commit()

    def propose() -> None:
        offset = state["offset"]
        state["started"] = time.perf_counter()
        os.write(fd, ENTRY)
        state["written"] = offset
        if fsync == "thread":
            fut = loop.run_in_executor(None, os.fdatasync, fd)
            fut.add_done_callback(lambda _f, o=offset: flushed(o))
        elif fsync == "inline":
            # after the answers are out, as a node's loop would order it
            loop.call_soon(lambda o=offset: (os.fdatasync(fd), flushed(o)))
        else:
            state["flushed"] = offset
        for conn, fetch_offset in list(parked.items()):
            if fetch_offset == offset:
                del parked[conn]
                conn.send(offset, ENTRY)

    def maybe_commit() -> None:
        offset = state["offset"]
        if state["flushed"] < offset or sum(1 for a in acked.values() if a > offset) < 1:
            return
        latencies_us.append((time.perf_counter() - state["started"]) * 1e6)
        state["offset"] = offset + 1
        if state["warm"] and len(latencies_us) == state["warm"]:
            latencies_us.clear()
            state["warm"] = 0
            state["cpu"] = _cpu_s()
            for conn in followers:
                conn.send(0)  # measuring starts: the followers start their CPU clocks
        if not state["warm"] and len(latencies_us) >= commits:
            cpu = _cpu_s() - state["cpu"]
            for conn in followers:
                conn.send(2**64 - 1)
            out.put({"latencies_us": latencies_us, "leader_cpu_s": cpu})
            loop.call_later(0.2, loop.stop)
            return
        loop.call_soon(propose)

    def on_fetch(conn: _Frames, offset: int, payload: bytes) -> None:
        if conn not in followers:
            followers.append(conn)
            if len(followers) == 2 and not all_connected.done():
                all_connected.set_result(None)
        acked[conn] = offset
        if offset <= state["written"]:  # the slower follower, behind an entry already proposed
            conn.send(offset, ENTRY)
        else:
            parked[conn] = offset
        maybe_commit()

    async def main() -> None:
        await loop.create_server(lambda: _Frames(on_fetch), sock=sock)
        await all_connected
        propose()

    loop.create_task(main())
    loop.run_forever()
    os.close(fd)


def one_round(commits: int, leader_fsync: str, follower_fsync: str, directory: Path) -> dict:
    directory.mkdir(parents=True)
    # spawn: a fresh interpreter per process, as the nodes are (and safe from a caller with threads)
    ctx = multiprocessing.get_context("spawn")
    out, cpu_out, port_out = ctx.Queue(), ctx.Queue(), ctx.Queue()
    lead = ctx.Process(target=leader, args=(commits, str(directory / "leader"), leader_fsync, port_out, out))
    lead.start()
    port = port_out.get(timeout=60)
    follows = [
        ctx.Process(target=follower, args=(port, str(directory / f"f{i}"), follower_fsync, cpu_out)) for i in range(2)
    ]
    for proc in follows:
        proc.start()
    result = out.get(timeout=600)
    follower_cpu = [cpu_out.get(timeout=60) for _ in follows]
    for proc in [lead, *follows]:
        proc.join(30)
        if proc.is_alive():
            proc.kill()
    lat = sorted(result["latencies_us"])
    n = len(lat)
    return {
        "commits": n,
        "p50_ms": percentile(lat, 0.5) / 1000,
        "p99_ms": percentile(lat, 0.99) / 1000,
        "mean_ms": statistics.fmean(lat) / 1000,
        "leader_cpu_us_per_commit": result["leader_cpu_s"] / n * 1e6,
        "follower_cpu_us_per_commit": [c / n * 1e6 for c in follower_cpu],
    }


async def _quorum_rounds(rounds: int, commits: int, floor_round, report) -> list[tuple[dict, dict]]:
    """Alternate a floor round (in a thread: it blocks) and the real quorum's one-at-a-time phase."""
    from raft_bench import ProcCluster, one_at_a_time, settle  # beside this file

    payload = ENTRY
    with tempfile.TemporaryDirectory(prefix="raft-floor-quorum-") as tmp:
        cluster = ProcCluster(Path(tmp) / "cluster", client_streams=True)
        try:
            cluster.start_all()
            leader_id = await settle(cluster, payload)
            pairs = []
            for i in range(rounds):
                floor = await asyncio.get_running_loop().run_in_executor(None, floor_round, i)
                quorum = await one_at_a_time(cluster, leader_id, commits, payload)
                report(quorum)
                pairs.append((floor, quorum))
            return pairs
        finally:
            await cluster.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=3000, help="one-at-a-time commits per round, after 200 warm-up")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--leader-fsync", choices=("thread", "inline", "none"), default="thread")
    ap.add_argument("--follower-fsync", choices=("inline", "none"), default="inline")
    ap.add_argument("--dir", type=Path, default=None, help="where the three files go (default: a temporary dir)")
    ap.add_argument("--quorum", action="store_true", help="after each round, raft_bench's one-at-a-time phase")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    for flag, value in (("--commits", args.commits), ("--rounds", args.rounds)):
        if value < 1:
            ap.error(f"{flag} must be at least 1, not {value}")  # no figure comes from zero commits
    rows: list[dict] = []
    quorum_rows: list[dict] = []
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="raft-floor-", dir=args.dir) as tmp:

        def floor_round(i: int) -> dict:
            row = one_round(args.commits, args.leader_fsync, args.follower_fsync, Path(tmp) / str(i))
            if not args.json:
                print(
                    f"round {i + 1}, floor: leader p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms; "
                    f"CPU per commit leader {row['leader_cpu_us_per_commit']:.0f} µs, followers "
                    + " / ".join(f"{c:.0f}" for c in row["follower_cpu_us_per_commit"])
                    + " µs",
                    flush=True,
                )
            return row

        def report_quorum(quorum: dict) -> None:
            if args.json:
                return
            cpu = quorum["cpu_us_per_commit"]
            print(
                f"         quorum: leader p50 {quorum['leader_p50_ms']:.3f} ms, "
                f"p99 {quorum['leader_p99_ms']:.3f} ms; CPU per commit leader {cpu['leader']:.0f} µs, followers "
                + " / ".join(f"{c:.0f}" for c in cpu["followers"])
                + f" µs, client {cpu['client']:.0f} µs",
                flush=True,
            )

        if args.quorum:
            pairs = asyncio.run(_quorum_rounds(args.rounds, args.commits, floor_round, report_quorum))
            rows = [floor for floor, _ in pairs]
            quorum_rows = [quorum for _, quorum in pairs]
        else:
            rows = [floor_round(i) for i in range(args.rounds)]
    summary = {
        "leader_fsync": args.leader_fsync,
        "follower_fsync": args.follower_fsync,
        "load1_start": load_start,
        "load1_end": os.getloadavg()[0],
        "rounds": rows,
        **({"quorum_rounds": quorum_rows} if args.quorum else {}),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(f"load average {load_start:.2f} before, {summary['load1_end']:.2f} after")


if __name__ == "__main__":
    main()
