"""Resource attacks on a live quorum (issue 11, section 6): does one hostile client move a node?

Three real node processes (`python -m tests.integration.raft_kv_node`, the Raft component behind
the node's listener) on 127.0.0.1 with `kraftpy cluster start`'s timeouts (election 300 ms,
fetch 600 ms). Each attack targets one node; during it this process samples, every 50 ms, the
target's `/kv/state` round trip (a proxy for how long its event loop is blocked), its RSS and
open descriptors (/proc), and afterwards counts elections (epoch changes) on the survivors.

* control: no attack, the same probe for 10 s (what the machine's load alone does).
* big-body: `--big-bodies` POSTs of a `--big-mib` MiB CBOR body of empty maps (items, the
  expensive thing to decode) to the leader's /raft/vote.
* stream-flood: one stream to the leader's /rpc/stream that sends `--frames` calls (1 KiB each)
  as fast as the node takes them and never looks at an answer (its bytes are read and dropped, as
  a client library would buffer them; `--no-drain` leaves them in the socket); held open 5 s.
* idle-connections: the target (a follower) gets RLIMIT_NOFILE `--fd-limit`; `--connections`
  idle TCP connections are opened to it; then the leader is SIGKILLed, so the target must vote
  and persist its quorum-state with the connections still open.

    python benchmarks/edge_bench.py              # all three, summary table
    python benchmarks/edge_bench.py --json

Every loop is bounded; every process started is stopped by pid. docs/operations.md has the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kraftpy.protocol.errors import KafkaError  # noqa: E402
from kraftpy.protocol.shell.rpc import STREAM_PATH  # noqa: E402
from kraftpy.protocol.stream_frames import frame as stream_frame  # noqa: E402
from kraftpy.protocol.stream_frames import upgrade_request  # noqa: E402
from tests.integration.raft_procs import ProcCluster  # noqa: E402

SAMPLE_S = 0.05


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


class Probe:
    """Samples the target while an attack runs: round trip of a status call, RSS, descriptors."""

    def __init__(self, cluster: ProcCluster, node_id: int) -> None:
        self.cluster, self.node_id = cluster, node_id
        self.pid = cluster.procs[node_id].pid
        self.max_round_trip_ms = 0.0
        self.failed_probes = 0
        self.rss_before = rss_mib(self.pid)
        self.rss_peak = self.rss_before
        self.fds_peak = open_fds(self.pid)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            start = time.perf_counter()
            state = await self.cluster.state(self.node_id, timeout_ms=10_000)
            elapsed_ms = (time.perf_counter() - start) * 1000
            if state is None:
                self.failed_probes += 1
            self.max_round_trip_ms = max(self.max_round_trip_ms, elapsed_ms)
            self.rss_peak = max(self.rss_peak, rss_mib(self.pid))
            self.fds_peak = max(self.fds_peak, open_fds(self.pid))
            await asyncio.sleep(SAMPLE_S)

    def __enter__(self) -> Probe:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def result(self) -> dict[str, Any]:
        return {
            "max_status_round_trip_ms": round(self.max_round_trip_ms, 1),
            "failed_status_calls": self.failed_probes,
            "rss_mib_before": round(self.rss_before, 1),
            "rss_mib_peak": round(self.rss_peak, 1),
            "rss_mib_after": round(rss_mib(self.pid), 1),
            "open_fds_peak": self.fds_peak,
            "target_alive": self.cluster.procs[self.node_id].poll() is None,
        }


async def epochs(cluster: ProcCluster) -> dict[int, int]:
    out = {}
    for node_id in cluster.alive():
        state = await cluster.state(node_id, timeout_ms=3000)
        if state is not None:
            out[node_id] = state["raft"]["epoch"]
    return out


def big_body(mib: int) -> bytes:
    items = mib * 1024 * 1024 - 9
    return b"\xa1\x64body\x9b" + items.to_bytes(8, "big") + b"\xa0" * items  # {"body": [{}, {}, ...]}


def post_raw(port: int, path: str, body: bytes, timeout_s: float = 120) -> str:
    """One HTTP POST over a plain socket; the status line of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/cbor\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode() + body)
        data = b""
        with contextlib.suppress(OSError):
            while b"\r\n" not in data:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                data += chunk
        return data.split(b"\r\n", 1)[0].decode(errors="replace")


async def attack_big_body(cluster: ProcCluster, args: argparse.Namespace) -> dict[str, Any]:
    leader = await cluster.wait_leader()
    body = big_body(args.big_mib)
    before = await epochs(cluster)
    answers = []
    with Probe(cluster, leader) as probe:
        for _ in range(args.big_bodies):
            answers.append(await asyncio.to_thread(post_raw, cluster.ports[leader], "/raft/vote", body))
        await asyncio.sleep(2)
    after = await epochs(cluster)
    return {"target": "leader", "answers": sorted(set(answers)), **probe.result(), **elections(before, after)}


def flood_stream(port: int, frames: int, send_timeout_s: float, drain: bool) -> tuple[socket.socket, int]:
    """Send `frames` calls as fast as the node takes them, never looking at an answer. With `drain`
    the socket is still read (and the bytes dropped), as a client library buffering answers its
    caller never takes would: the node's writes never block, so only its own bound stops it."""
    sock = socket.create_connection(("127.0.0.1", port))
    if not drain:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.sendall(upgrade_request(STREAM_PATH, {"Host": f"127.0.0.1:{port}"}))
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise RuntimeError(f"the stream upgrade was refused: {head[:80]!r}")
    if drain:

        def drop_answers() -> None:
            with contextlib.suppress(OSError):
                while sock.recv(1 << 16):
                    pass

        threading.Thread(target=drop_answers, daemon=True).start()
    pad = b"\x63pad\x59\x04\x00" + b"p" * 1024  # "pad": 1 KiB of bytes, a field the route ignores
    frame = stream_frame(b"\xa3\x62id\x01\x64path\x6d/admin/status\x64body\xa1" + pad)
    sock.settimeout(send_timeout_s)
    sent = 0
    with contextlib.suppress(OSError):
        for _ in range(frames):
            sock.sendall(frame)
            sent += 1
    return sock, sent


async def attack_stream(cluster: ProcCluster, args: argparse.Namespace) -> dict[str, Any]:
    leader = await cluster.wait_leader()
    before = await epochs(cluster)
    with Probe(cluster, leader) as probe:
        sock, sent = await asyncio.to_thread(flood_stream, cluster.ports[leader], args.frames, 5.0, args.drain)
        await asyncio.sleep(5)  # the connection stays open, its answers unread
        rss_held = rss_mib(cluster.procs[leader].pid)
        sock.close()
        await asyncio.sleep(1)
    after = await epochs(cluster)
    return {
        "target": "leader",
        "answers_read_and_dropped": args.drain,
        "frames_sent": sent,
        "rss_mib_while_held": round(rss_held, 1),
        **probe.result(),
        **elections(before, after),
    }


def open_idle(port: int, count: int) -> list[socket.socket]:
    held = []
    for _ in range(count):
        try:
            held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            break
    return held


async def attack_connections(cluster: ProcCluster, args: argparse.Namespace) -> dict[str, Any]:
    leader = await cluster.wait_leader()
    target = next(n for n in sorted(cluster.ports) if n != leader)
    pid = cluster.procs[target].pid
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (args.fd_limit, args.fd_limit))
    before = await epochs(cluster)
    with Probe(cluster, target) as probe:
        held = await asyncio.to_thread(open_idle, cluster.ports[target], args.connections)
        await asyncio.sleep(2)
        fds_held = open_fds(pid)
        still_open = 0
        for s in held:  # the ones the node closed at once read as EOF
            s.setblocking(False)
            try:
                still_open += s.recv(1) != b""
            except BlockingIOError:
                still_open += 1
            except OSError:
                pass
        cluster.kill(leader)  # the target must now vote: its quorum-state is written with the fds in use
        survivors = [n for n in cluster.ports if n != leader]
        try:
            new_leader: int | None = await cluster.wait_leader(timeout_s=20, among=survivors)
        except TimeoutError:
            new_leader = None
        for s in held:
            s.close()
        await asyncio.sleep(1)
    result = {
        "target": "follower",
        "connections_opened": len(held),
        "connections_kept_open_by_node": still_open,
        "target_open_fds_while_held": fds_held,
        "new_leader_after_sigkill": new_leader,
        **probe.result(),
    }
    cluster.start(leader)
    await asyncio.sleep(2)
    after = await epochs(cluster)
    result.update(elections(before, after))
    return result


def elections(before: dict[int, int], after: dict[int, int]) -> dict[str, Any]:
    return {"epoch_before": max(before.values(), default=None), "epoch_after": max(after.values(), default=None)}


async def control(cluster: ProcCluster, args: argparse.Namespace) -> dict[str, Any]:
    """No attack: the same probe for 10 s, for the elections and round trips load alone causes."""
    leader = await cluster.wait_leader()
    before = await epochs(cluster)
    with Probe(cluster, leader) as probe:
        await asyncio.sleep(10)
    after = await epochs(cluster)
    return {"target": "leader", **probe.result(), **elections(before, after)}


ATTACKS = {
    "control": control,
    "big-body": attack_big_body,
    "stream-flood": attack_stream,
    "idle-connections": attack_connections,
}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"load_before": os.getloadavg()}
    for name in args.attacks:
        with tempfile.TemporaryDirectory(prefix="kraftpy-edge-bench-") as tmp:
            cluster = ProcCluster(Path(tmp))
            cluster.start_all()
            try:
                for _ in range(20):  # a warm-up commit (the leader may still change under load)
                    try:
                        await cluster.append(await cluster.wait_leader(), [b"warm-up"])
                        break
                    except KafkaError:
                        await asyncio.sleep(0.5)
                await asyncio.sleep(1)
                results[name] = await ATTACKS[name](cluster, args)
                results[name]["node_log_fatal"] = any(
                    "fatal" in cluster.log_path(n).read_text(errors="replace").lower() for n in cluster.ports
                )
            finally:
                await cluster.close()
    results["load_after"] = os.getloadavg()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--attacks", nargs="+", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--big-mib", type=int, default=47)
    parser.add_argument("--big-bodies", type=int, default=3)
    parser.add_argument("--frames", type=int, default=300_000)
    parser.add_argument("--connections", type=int, default=3000)
    parser.add_argument("--no-drain", dest="drain", action="store_false", help="stream-flood: leave answers unread")
    parser.add_argument("--fd-limit", type=int, default=2048)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.connections + 256)), hard))
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop the nodes on SIGTERM too
    results = asyncio.run(run(args))
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for name in args.attacks:
        print(f"== {name}")
        for key, value in results[name].items():
            print(f"  {key:32} {value}")
    print(f"load before {results['load_before']}, after {results['load_after']}")


if __name__ == "__main__":
    main()
