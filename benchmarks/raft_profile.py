"""Where a one-at-a-time Raft commit goes: py-spy on the leader and one follower while appends run.

Starts raft_bench.py's 3-voter cluster, runs its one-at-a-time phase, and records each of the two
processes with `py-spy record -f raw` for `--seconds`; then prints, per process, the share of
sampled ticks whose innermost frame is each function (the top `--top`). docs/perf-raft.md has the
results (2026-11-28, 11:13). Needs py-spy (`pip install py-spy`).

    python benchmarks/raft_profile.py --appends 9000 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
from pathlib import Path

from pyspy_raw import innermost, share_table  # benchmarks/ is on sys.path when run
from raft_bench import REPO_ROOT, one_at_a_time, progress, settle

sys.path.insert(0, str(REPO_ROOT))

from tests.integration.raft_procs import ProcCluster


async def run(args: argparse.Namespace, out: Path) -> dict[str, Path]:
    payload = b"e" * 100
    cluster = ProcCluster(out / "cluster", client_streams=True)
    try:
        progress("starting 3 voters")
        cluster.start_all()
        leader = await settle(cluster, payload)
        follower = next(n for n in cluster.ports if n != leader)
        await one_at_a_time(cluster, leader, 1000, payload)  # warm-up
        raws = {"leader": out / "leader.txt", "follower": out / "follower.txt"}
        pids = {"leader": cluster.procs[leader].pid, "follower": cluster.procs[follower].pid}
        record = ["py-spy", "record", "-r", "250", "-d", str(args.seconds), "-f", "raw"]
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        spies = [subprocess.Popen([*record, "-o", str(raws[n]), "-p", str(pids[n])], **quiet) for n in raws]
        progress(f"one at a time: {args.appends:,} appends, py-spy on nodes {leader} and {follower}")
        result = await one_at_a_time(cluster, leader, args.appends, payload)
        for spy in spies:
            spy.wait(args.seconds + 30)
        print(f"leader p50 / p99 {result['leader_p50_ms']:.2f} / {result['leader_p99_ms']:.2f} ms (sampled)")
        return raws
    finally:
        await cluster.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=9000, help="one-at-a-time appends while sampled")
    parser.add_argument("--seconds", type=int, default=10, help="py-spy's recording time")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raft-profile-") as tmp:
        raws = asyncio.run(run(args, Path(tmp)))
        for name, raw in raws.items():
            total, by_leaf = innermost(raw)
            print(f"\n{name}: {total:,} samples; innermost function, share of samples")
            print(share_table(total, by_leaf, args.top))


if __name__ == "__main__":
    main()
