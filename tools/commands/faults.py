"""`kraftpy faults run|cleanup`: a fault run on a cluster whose nodes each have a network namespace.

Exit codes of `run`: 0 the history is valid, 1 anomalies found, 2 the run could not happen.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

import click
from rich.console import Console

from kraftpy.tools.faults.netns import NETWORKS, NetError, choose_network, cleanup_stale, supported
from kraftpy.tools.faults.schedule import FAMILIES, NEMESES, SCHEDULES, expand, needs_partitions
from kraftpy.tools.faults.workloads import WORKLOADS
from kraftpy.tools.tables import narrow_table

err_console = Console(stderr=True)
WORKLOAD_HELP = (
    "queue: Jepsen's send/poll; txn: transactions of several sends and polls; groups: consumer-group members "
    "join, leave, crash; register: read/write/cas on the metadata quorum (docs/jepsen.md)."
)


@click.group("faults")
def faults() -> None:
    """Run a workload under faults (real partitions in network namespaces) and check it."""


@faults.command("run")
@click.option("--seed", type=int, help="Seed of the nemesis schedule and the workload [default: random].")
@click.option("--time-limit-s", type=click.FloatRange(1, 24 * 3600), default=30, show_default=True)
@click.option("--nodes", "node_count", type=click.IntRange(3, 9), default=3, show_default=True)
@click.option(
    "--nemesis",
    "nemeses",
    type=click.Choice((*NEMESES, *FAMILIES)),
    multiple=True,
    help="A fault to inject, or a family of them (partition, leader, disk, client, all); repeat for several "
    "[default: every nemesis but disk-full].",
)
@click.option(
    "--schedule",
    type=click.Choice(SCHEDULES),
    default="one-at-a-time",
    show_default=True,
    help="one-at-a-time: each fault healed before the next; overlapping: faults on at once (a pause or a kill "
    "during a partition), never two on one node, a majority of nodes always up.",
)
@click.option(
    "--network",
    type=click.Choice(NETWORKS),
    default="auto",
    show_default=True,
    help="netns: each node in a network namespace (root, ip, nft), partitions possible; loopback: nodes on "
    "127.x.y.z, no partitions; auto: netns where the machine can, else loopback (the run says which).",
)
@click.option("--hostile", is_flag=True, help="Also send malformed, forged and oversized requests throughout.")
@click.option(
    "--audit/--no-audit",
    default=True,
    show_default=True,
    help="After the run, the PySpark audit of every replica's files (a JVM start: tens of seconds).",
)
@click.option("--rate", type=click.FloatRange(min=0.1), help="Operations per second, all workers together.")
@click.option(
    "--workload", type=click.Choice(sorted(WORKLOADS)), default="queue", show_default=True, help=WORKLOAD_HELP
)
@click.option(
    "--client",
    type=click.Choice(("kraftpy", "confluent")),
    default="kraftpy",
    show_default=True,
    help="The workload's client: kraftpy.client, or librdkafka through confluent-kafka.",
)
@click.option(
    "--sub-via",
    type=click.Choice(("assign", "subscribe")),
    default="assign",
    show_default=True,
    help="Consumers assign every partition, or subscribe as one group (Jepsen's --sub-via).",
)
@click.option(
    "--lose-tail-unsafe",
    is_flag=True,
    help="lose-tail without waiting for another clean in-sync copy of each partition: may take every copy "
    "at once, which acks=all without fsync does not survive (shows that loss; docs/jepsen.md).",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where the history, the verdict and the cluster's files go [default: ./faults-<time>].",
)
def run(
    seed: int | None,
    time_limit_s: float,
    node_count: int,
    nemeses: tuple[str, ...],
    rate: float | None,
    out_dir: Path | None,
    hostile: bool,
    audit: bool,
    schedule: str,
    network: str,
    workload: str,
    client: str,
    sub_via: str,
    lose_tail_unsafe: bool,
) -> None:
    """Start a cluster in namespaces, produce under the nemeses, heal, read back, check, report."""
    from kraftpy.tools.faults import watchdog
    from kraftpy.tools.faults.run import CouldNotRun, FaultRun, run_bound_s

    seed = random.randrange(2**32) if seed is None else seed
    out_dir = out_dir or Path(f"faults-{time.strftime('%Y%m%d-%H%M%S')}")
    try:
        network, why = choose_network(network)
    except NetError as exc:
        err_console.print(f"[red]cannot run: {exc}[/] (docs/jepsen.md)")
        sys.exit(2)
    # disk-full needs a loop-mounted file system, so it runs only when named; loopback mode cannot partition
    named = bool(nemeses)
    nemeses = expand(nemeses) if nemeses else tuple(n for n in NEMESES if n != "disk-full")
    if network == "loopback":
        err_console.print(f"[yellow]loopback mode[/]: {why}; faults limited to kill, pause, lose-tail and disk-full")
        cut = needs_partitions(nemeses)
        if cut and named:
            err_console.print(
                f"[red]cannot run: {', '.join(cut)} cut the network, which needs network namespaces "
                "(root, `ip`, `nft`); loopback mode has kill, pause, kill-leader, pause-leader, lose-tail, disk-full[/]"
            )
            sys.exit(2)
        nemeses = tuple(n for n in nemeses if n not in cut)
    broken = os.environ.get("KRAFTPY_TEST_BREAK")
    replay = (
        (f"KRAFTPY_TEST_BREAK={broken} " if broken else "")
        + f"kraftpy faults run --seed {seed} --time-limit-s {time_limit_s:g} --nodes {node_count} "
        + " ".join(f"--nemesis {n}" for n in nemeses)
        + (f" --rate {rate:g}" if rate else "")
        + (f" --schedule {schedule}" if schedule != "one-at-a-time" else "")
        + (" --network loopback" if network == "loopback" else "")
        + f" --workload {workload} --client {client} --sub-via {sub_via}"
        + (" --hostile" if hostile else "")
        + (" --lose-tail-unsafe" if lose_tail_unsafe else "")
        + ("" if audit else " --no-audit")
    )
    err_console.print(
        f"fault run: seed {seed}, {time_limit_s:g} s, {node_count} nodes, nemeses {', '.join(nemeses)}, {schedule}, "
        f"workload {workload} via {client} ({sub_via})"
    )
    fault_run = FaultRun(
        out_dir.resolve(), seed, time_limit_s, node_count, nemeses, rate, err_console.print, hostile, audit, replay,
        schedule=schedule, network=network, workload=workload, client=client, sub_via=sub_via,
        lose_tail_unsafe=lose_tail_unsafe,
    )  # fmt: skip
    out_dir.resolve().mkdir(parents=True, exist_ok=True)
    threads_dump = watchdog.arm_dump(out_dir.resolve())
    guard = watchdog.start(run_bound_s(time_limit_s, audit), out_dir.resolve())
    try:
        result = fault_run.run()
    except (CouldNotRun, NetError) as exc:
        err_console.print(f"[red]could not run: {exc}[/]\nreplay: {replay}")
        sys.exit(2)
    except Exception:  # a bug or a stuck phase: the run says nothing about the cluster, so not exit 1
        err_console.print_exception()
        err_console.print(f"[red]could not run[/]\nreplay: {replay}")
        sys.exit(2)
    finally:
        fault_run.close()
        guard.kill()
        guard.wait()
        watchdog.disarm_dump(threads_dump)
    title = "valid" if result.valid else "UNKNOWN" if result.valid is None else "ANOMALIES"
    table = narrow_table("", "", title=f"fault run: {title}")
    table.show_header = False
    table.add_row("seed", str(seed))
    table.add_row("network", network)
    table.add_row("nemeses", ", ".join(f"{n} x{c}" for n, c in sorted(result.faults.items())) or "none happened")
    if result.skipped:  # the fault model refused them (never silently)
        table.add_row("skipped", ", ".join(f"{n} x{c}" for n, c in sorted(result.skipped.items())))
    table.add_row(
        "ops", f"{result.invoked} invoked, {result.ok} ok, {result.fail} failed, {result.info} unknown (info)"
    )
    found = ", ".join(f"{k} x{len(v) if isinstance(v, list | dict) else v}" for k, v in result.anomalies.items())
    undecided = "undecided: " + ", ".join(sorted(result.undecided))
    table.add_row("verdict", "valid" if result.valid else undecided if result.valid is None else found)
    table.add_row("audit", "not run" if result.audit is None else "ok" if result.audit["ok"] else "FINDINGS")
    table.add_row("history", str(result.history))
    table.add_row("report", str(out_dir.resolve() / "report.html"))
    table.add_row("replay", replay)
    Console().print(table)
    # As Jepsen's :valid? true / false / :unknown; 2 is also "could not run": no verdict either way.
    sys.exit(0 if result.valid else 2 if result.valid is None else 1)


@faults.command("cleanup")
@click.option("--all", "everything", is_flag=True, help="Also the networks of runs that are still going.")
def cleanup(everything: bool) -> None:
    """Remove what killed fault runs left: their namespaces (veths and bridges go with them), their processes."""
    ok, why = supported()
    if not ok:
        err_console.print(f"[red]cannot clean up: {why}[/]")
        sys.exit(2)
    removed = cleanup_stale(everything=everything)
    click.echo(f"removed {len(removed)} namespace(s)" + (f": {', '.join(removed)}" if removed else ""))
