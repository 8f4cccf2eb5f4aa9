"""Raft quorum figures: commit throughput and latency, failover after SIGKILL and after a graceful restart.

Three real node processes (`python -m tests.integration.raft_kv_node`: the Raft
component plus a hash-chain state machine) on 127.0.0.1 with the timeouts
`kraftpy cluster start` uses, 100-byte entries. The client is this process, calling
the nodes' CBOR routes over one RPC stream per node (`--client-transport http`: one
HTTP request per call, as before 2026-11-27).

* one at a time: one append in flight; latency measured by the client (as
  ZooKeeper's sync writes are) and, inside the leader, from the append call to
  its commit (no client hop).
* many in flight: `--clients` concurrent requests, each carrying `--per-request`
  separate appends (each its own Raft append and commit wait), as ZooKeeper's
  async writes pipeline many operations over one connection; throughput is
  committed entries per second, latency each append's commit time in the leader.
* round trips: one small call at a time to a follower's `/kv/state` route, over
  HTTP and over the RPC stream Raft peers use (`--round-trips`), to show what
  one exchange costs on each transport.
* failover: SIGKILL the leader, then propose on the survivors until one commits;
  the time from the kill to that commit. The same with SIGTERM (a graceful
  stop: the leader resigns with EndQuorumEpoch). The stopped node is restarted
  and caught up between trials.

    python benchmarks/raft_bench.py                 # summary table
    python benchmarks/raft_bench.py --json          # machine-readable
    python benchmarks/raft_bench.py --trials 5 --entries 5000   # a quick run
    python benchmarks/raft_bench.py --trials 0 --entries 20000 --zookeeper   # ZooKeeper beside it

With --zookeeper, the ZooKeeper anchor (../shared/anchors: zk_cluster.sh, zk_bench.py; needs the
Debian zookeeper package and kazoo) runs in the same invocation, after kraftpy's cluster is stopped,
and its sync and async write figures fill the ZooKeeper column.

docs/perf-raft.md has the results on the reference machine and where the time goes.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from proc_cpu import cpu_seconds

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kraftpy.protocol.errors import ErrorCode, KafkaError  # noqa: E402
from kraftpy.protocol.shell.rpc import RpcClient  # noqa: E402
from kraftpy.tools.commands.perf import percentile  # noqa: E402
from tests.integration.raft_procs import LOCAL_TIMEOUTS, ProcCluster  # noqa: E402

ANCHORS = REPO_ROOT.parent / "shared" / "anchors"
ZK_REFERENCE = {"async_writes_per_s": "1,400-1,800", "sync_p50_ms": 1.0, "sync_p99_ms": 3.3, "failover_s": 0.5}


def progress(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message} (load1 {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)


ZK_JAR = Path("/usr/share/java/zookeeper.jar")  # what shared/anchors/zk_cluster.sh runs


def zookeeper_missing(anchors: Path) -> str | None:
    """What the ZooKeeper anchor lacks on this machine, checked before kraftpy's part runs (so a missing
    package does not cost a measurement), or None."""
    if not (anchors / "zk_cluster.sh").exists():
        return f"no {anchors / 'zk_cluster.sh'} (--anchors names the shared/anchors folder)"
    if not ZK_JAR.exists():
        return f"no {ZK_JAR}: install the Debian package (apt-get install zookeeper)"
    if importlib.util.find_spec("kazoo") is None:
        return "the ZooKeeper bench's client is missing: pip install kazoo"
    return None


def run_zookeeper(anchors: Path) -> dict[str, Any]:
    """The ZooKeeper anchor now: a 3-node ensemble on loopback, kazoo's one-at-a-time and async sets."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="raft-bench-zk-") as tmp:
        out = Path(tmp) / "zk.json"
        script = {"stdin": subprocess.DEVNULL, "stdout": sys.stderr}  # stdout may carry --json
        subprocess.run([str(anchors / "zk_cluster.sh"), "start"], check=True, timeout=300, **script)
        try:
            bench = [sys.executable, str(anchors / "zk_bench.py"), "--runs", "1", "--failover-runs", "0"]
            quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL}
            subprocess.run([*bench, "--out", str(out)], check=True, timeout=900, **quiet)
        finally:
            subprocess.run([str(anchors / "zk_cluster.sh"), "stop"], timeout=120, **script)
        run = json.loads(out.read_text())["runs"][0]
    return {
        "sync_p50_ms": run["sync_set_100B"]["p50_ms"],
        "sync_p99_ms": run["sync_set_100B"]["p99_ms"],
        "sync_writes_per_s": run["sync_set_100B"]["ops_s"],
        "async_writes_per_s": run["async_set_100B"]["ops_s"],
        "load_average": [load_before, os.getloadavg()[0]],
    }


async def one_at_a_time(cluster: ProcCluster, leader: int, count: int, payload: bytes) -> dict[str, Any]:
    client_ms: list[float] = []
    leader_ms: list[float] = []
    for _ in range(50):  # warm-up: connections, caches
        await cluster.append(leader, [payload])
    cpu_before = process_cpu_s(cluster)
    start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        answer = await cluster.append(leader, [payload])
        client_ms.append((time.perf_counter() - t0) * 1000)
        leader_ms.append(answer["commit_us"][0] / 1000)
    elapsed = time.perf_counter() - start
    cpu_after = process_cpu_s(cluster)
    cpu_us = {who: (cpu_after[who] - cpu_before[who]) / count * 1e6 for who in cpu_before}
    return {
        "entries": count,
        "entries_per_s": count / elapsed,
        # CPU per commit, by process: what the two cores must fit into one commit cycle
        "cpu_us_per_commit": {
            "leader": cpu_us.pop(str(leader)),
            "client": cpu_us.pop("client"),
            "followers": sorted(cpu_us.values()),
        },
        "client_p50_ms": percentile(sorted(client_ms), 0.5),
        "client_p99_ms": percentile(sorted(client_ms), 0.99),
        "leader_p50_ms": percentile(sorted(leader_ms), 0.5),
        "leader_p99_ms": percentile(sorted(leader_ms), 0.99),
    }


def process_cpu_s(cluster: ProcCluster) -> dict[str, float]:
    """CPU seconds (user + system) so far of each node process, by node id, and of this client."""
    out = {str(node_id): cpu_seconds(proc.pid) for node_id, proc in cluster.procs.items()}
    me = os.times()
    out["client"] = me.user + me.system
    return out


async def round_trips(cluster: ProcCluster, node_id: int, count: int) -> dict[str, Any]:
    """One call at a time to the same route over HTTP and over the stream: what a transport costs."""
    out: dict[str, Any] = {"calls": count}
    for name, streams in (("http", False), ("stream", True)):
        rpc = RpcClient(request_timeout_ms=3000, credential=cluster.rpc.credential, peer_streams=streams)
        times: list[float] = []
        try:
            for i in range(count + 100):  # the first 100 warm up (connections, caches)
                t0 = time.perf_counter()
                await rpc.call(cluster.address(node_id), "/kv/state", {})
                if i >= 100:
                    times.append((time.perf_counter() - t0) * 1000)
        finally:
            await rpc.close()
        out[f"{name}_p50_ms"] = percentile(sorted(times), 0.5)
        out[f"{name}_p99_ms"] = percentile(sorted(times), 0.99)
    return out


async def many_in_flight(
    cluster: ProcCluster, leader: int, total: int, clients: int, per_request: int, payload: bytes
) -> dict[str, Any]:
    leader_ms: list[float] = []
    per_client = max(1, total // (clients * per_request))

    async def client() -> None:
        for _ in range(per_client):
            answer = await cluster.append(leader, [payload] * per_request, separate=True)
            leader_ms.extend(us / 1000 for us in answer["commit_us"])

    await cluster.append(leader, [payload] * per_request, separate=True)  # warm-up
    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = time.perf_counter() - start
    done = per_client * clients * per_request
    return {
        "entries": done,
        "in_flight": clients * per_request,
        "entries_per_s": done / elapsed,
        "leader_p50_ms": percentile(sorted(leader_ms), 0.5),
        "leader_p99_ms": percentile(sorted(leader_ms), 0.99),
    }


async def first_commit(cluster: ProcCluster, survivors: list[int], payload: bytes, timeout_s: float = 30.0) -> float:
    """Propose on every survivor until one commits; returns the monotonic time of that commit."""
    done = asyncio.Event()
    when: list[float] = []

    async def prober(node_id: int) -> None:
        while not done.is_set():
            try:
                await cluster.call(node_id, "/kv/append", {"records": [payload]}, timeout_ms=2000)
            except KafkaError as err:
                if err.code not in (
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    ErrorCode.NETWORK_EXCEPTION,
                    ErrorCode.REQUEST_TIMED_OUT,
                    ErrorCode.BROKER_NOT_AVAILABLE,
                ):
                    raise
                await asyncio.sleep(0.002)
                continue
            if not done.is_set():
                when.append(time.monotonic())
                done.set()

    tasks = [asyncio.create_task(prober(n)) for n in survivors]
    try:
        async with asyncio.timeout(timeout_s):
            await done.wait()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return when[0]


async def settle(cluster: ProcCluster, payload: bytes) -> int:
    """Every node up, one leader, everyone applied the latest commit."""
    leader = await cluster.wait_leader(30)
    answer = await cluster.append(leader, [payload])
    for node_id in cluster.ports:
        await cluster.wait_applied(node_id, answer["last_offset"] + 1, 30)
    await asyncio.sleep(0.2)  # followers' fetch timers restart from a fresh answer
    return leader


async def failover(cluster: ProcCluster, trials: int, graceful: bool, payload: bytes) -> dict[str, Any]:
    times: list[float] = []
    for _ in range(trials):
        leader = await settle(cluster, payload)
        survivors = [n for n in cluster.ports if n != leader]
        t0 = time.monotonic()
        if graceful:
            cluster.signal(leader, signal.SIGTERM)
        else:
            cluster.signal(leader, signal.SIGKILL)
        t1 = await first_commit(cluster, survivors, payload)
        times.append(t1 - t0)
        cluster.wait_exit(leader, 30)
        cluster.start(leader)
    await settle(cluster, payload)
    return {
        "trials": trials,
        "median_s": statistics.median(times),
        "max_s": max(times),
        "min_s": min(times),
        "all_s": [round(t, 4) for t in times],
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    payload = b"e" * args.size
    with tempfile.TemporaryDirectory(prefix="raft-bench-") as tmp:
        # its ports are reserved below the ephemeral range (tests/ports.py)
        cluster = ProcCluster(Path(tmp), client_streams=args.client_transport == "stream")
        try:
            progress("starting 3 voters")
            cluster.start_all()
            leader = await settle(cluster, payload)
            progress(f"one at a time: {args.sequential:,} appends")
            results: dict[str, Any] = {
                "settings": {
                    **LOCAL_TIMEOUTS,
                    "entry_bytes": args.size,
                    "voters": 3,
                    "client_transport": args.client_transport,
                },
                "zookeeper_reference": ZK_REFERENCE,
                # other work on the machine skews every figure: the 1-minute load average before and after
                "load_average": [os.getloadavg()[0]],
            }
            results["one_at_a_time"] = await one_at_a_time(cluster, leader, args.sequential, payload)
            if args.round_trips > 0:
                progress(f"round trips: {args.round_trips:,} calls per transport")
                follower = next(n for n in cluster.ports if n != leader)
                results["round_trips"] = await round_trips(cluster, follower, args.round_trips)
            progress(f"many in flight: {args.entries:,} appends")
            results["many_in_flight"] = await many_in_flight(
                cluster, leader, args.entries, args.clients, args.per_request, payload
            )
            if args.trials > 0:
                progress(f"failover: {args.trials} trials after SIGKILL, {args.trials} after a graceful stop")
                results["failover_sigkill"] = await failover(cluster, args.trials, False, payload)
                results["failover_graceful"] = await failover(cluster, args.trials, True, payload)
            results["load_average"].append(os.getloadavg()[0])
        except BaseException:
            for node_id in cluster.ports:
                print(f"--- node {node_id} log tail ---\n{cluster.log_tail(node_id)}", file=sys.stderr)
            raise
        finally:
            await cluster.close()
    return results


def print_table(results: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="kraftpy Raft, 3 voters on loopback, 100-byte entries")
    table.add_column("figure")
    table.add_column("kraftpy", justify="right")
    zk = results.get("zookeeper")
    if zk is not None:
        table.add_column("ZooKeeper, this run", justify="right")
        zk_async, zk_sync = f"{zk['async_writes_per_s']:,.0f} (async set)", f"{zk['sync_writes_per_s']:,.0f} (sync set)"
        zk_p50, zk_p99 = f"{zk['sync_p50_ms']:.2f}", f"{zk['sync_p99_ms']:.2f}"
    else:
        table.add_column("ZooKeeper (reference, 2026-11-22)", justify="right")
        zk_async, zk_sync, zk_p50, zk_p99 = "1,400-1,800", "~885 (sync)", "1.0", "3.3"
    table.add_column("target (issue 16)", justify="right")
    one, many = results["one_at_a_time"], results["many_in_flight"]
    table.add_row("throughput, many in flight (entries/s)", f"{many['entries_per_s']:,.0f}", zk_async, ">= 10,000")
    table.add_row("throughput, one at a time (entries/s)", f"{one['entries_per_s']:,.0f}", zk_sync, "")
    table.add_row("commit latency p50, client (ms)", f"{one['client_p50_ms']:.2f}", zk_p50, "")
    table.add_row("commit latency p99, client (ms)", f"{one['client_p99_ms']:.2f}", zk_p99, "")
    table.add_row(
        "commit latency p50 / p99, in the leader (ms)",
        f"{one['leader_p50_ms']:.2f} / {one['leader_p99_ms']:.2f}",
        "",
        "<= 1.0 / <= 3.0",
    )
    if "cpu_us_per_commit" in one:
        cpu = one["cpu_us_per_commit"]
        followers = " + ".join(f"{f:,.0f}" for f in cpu["followers"])
        table.add_row(
            "CPU per commit, one at a time (µs): leader / followers / client",
            f"{cpu['leader']:,.0f} / {followers} / {cpu['client']:,.0f}",
            "",
            "",
        )
    table.add_row(
        f"latency p50 / p99 with {many['in_flight']} in flight (ms)",
        f"{many['leader_p50_ms']:.1f} / {many['leader_p99_ms']:.1f}",
        "",
        "",
    )
    if "round_trips" in results:
        rt = results["round_trips"]
        for name, label in (("http", "HTTP"), ("stream", "RPC stream")):
            table.add_row(
                f"one call's round trip over {label}, p50 / p99 (ms)",
                f"{rt[name + '_p50_ms']:.3f} / {rt[name + '_p99_ms']:.3f}",
                "",
                "",
            )
    for key, label, target in (("failover_sigkill", "SIGKILL", "<= 1.0"), ("failover_graceful", "graceful", "< 0.3")):
        if key in results:
            f = results[key]
            table.add_row(
                f"failover after {label}: median / max (s), {f['trials']} trials",
                f"{f['median_s']:.3f} / {f['max_s']:.3f}",
                "~0.5" if label == "SIGKILL" else "",
                target + " (median)",
            )
    Console().print(table)
    before, after = results["load_average"]
    Console().print(f"load average (1 min) before / after: {before:.2f} / {after:.2f}; 2 cores")
    if zk is not None:
        zb, za = zk["load_average"]
        Console().print(f"ZooKeeper ran after kraftpy's cluster stopped; load average {zb:.2f} / {za:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sequential", type=int, default=2000, help="appends one at a time")
    parser.add_argument("--entries", type=int, default=60000, help="appends in the many-in-flight run")
    parser.add_argument("--clients", type=int, default=4, help="concurrent client requests")
    parser.add_argument("--per-request", type=int, default=250, help="separate appends per client request")
    parser.add_argument("--round-trips", type=int, default=2000, help="calls per transport (0: none)")
    parser.add_argument("--size", type=int, default=100, help="entry bytes")
    parser.add_argument("--trials", type=int, default=20, help="failover trials of each kind (0: none)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--client-transport",
        choices=("stream", "http"),
        default="stream",
        help="how this process calls the leader: one RPC stream per node, as ZooKeeper's client keeps one "
        "session (default), or an HTTP request per call (the bench before 2026-11-27 11:00)",
    )
    parser.add_argument("--zookeeper", action="store_true", help="also run the ZooKeeper anchor, in this invocation")
    parser.add_argument("--anchors", type=Path, default=ANCHORS, help="the anchors' folder (shared/anchors)")
    args = parser.parse_args()
    missing = zookeeper_missing(args.anchors) if args.zookeeper else None
    if missing is not None:
        parser.error(f"--zookeeper: {missing}")
    try:
        import uvloop  # the nodes run on uvloop; so does the client, so it adds as little as it can

        uvloop.install()
    except ImportError:
        pass
    results = asyncio.run(run(args))
    if args.zookeeper:
        progress("ZooKeeper anchor: 3 nodes, kazoo sync and async sets")
        results["zookeeper"] = run_zookeeper(args.anchors)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print_table(results)


if __name__ == "__main__":
    main()
