"""The `register` workload: read, write and cas of one linearizable register on the metadata quorum.

Processes send `/controller/register_write` (a write, or a cas with `from`) to the controller they last
heard is active, and `/controller/register_read` to any controller node (only the active one may answer,
after Raft's read index; docs/metadata.md "Linearizable reads"). The history (its own file, so the
send/poll history keeps its model) is judged by `kraftpy check --model cas-register`. A read that errs
is `fail` (it changed nothing); so is a write that certainly did not happen (`never_took_effect`: a
refused cas, a controller that appended nothing, no connection); any other write error is `info` and the
process continues under a new number. A search that gives up leaves the run undecided (checks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from pathlib import Path
from typing import Any

from kraftpy.protocol.credentials import ADMIN_FILE
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.credential_files import load_credential
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.checks import CHECK_TIMEOUT_S, CheckFailed, Judgement, run_check
from kraftpy.tools.faults.history import HistoryWriter, RunEnd
from kraftpy.tools.faults.workloads import queue
from kraftpy.tools.faults.workloads.entry import Beside, Cli, Workload

CHECK_MODEL = "cas-register"
HISTORY_FILE = "register.jsonl"
KEY = "faults"
PROCESSES = 4
VALUES = 5  # few values: a stale read is likely to show as an impossible one
OP_TIMEOUT_MS = 5_000
PAUSE_S = 0.02  # bounds the history the linearizability search must cover


async def run_register(layout: ClusterLayout, out: Path, *, end: RunEnd, rng: random.Random) -> dict[str, int]:
    """Run the register processes until `end`, writing OUT/register.jsonl; returns counts of ok, fail, info."""
    with contextlib.closing(HistoryWriter(out / HISTORY_FILE)) as history:
        return await _run(layout, history, end, rng)


def judge(cli: Cli, out: Path) -> Judgement:
    """`kraftpy check --model cas-register` over the register history: not linearizable is an anomaly,
    a search that gave up (its bound: checks.py) leaves the run undecided."""
    try:
        check = run_check(cli, out / HISTORY_FILE, ["--model", CHECK_MODEL], CHECK_TIMEOUT_S)
    except CheckFailed as exc:
        return Judgement(anomalies={"register-check": str(exc)})
    (out / "register-check.json").write_text(json.dumps(check.body, indent=2) + "\n")
    if check.valid is None:
        return Judgement(undecided={"register-check": check.undecided})
    if check.valid is False:
        return Judgement(anomalies={"register-not-linearizable": check.failures[:5] or check.body})
    return Judgement()


def never_took_effect(error: KafkaError) -> bool:
    """Whether a failed write certainly did not happen: a failed cas, a controller that appended nothing
    (NOT_CONTROLLER with `appended: false`), no connection to send it on. Any other failure may still
    take effect (info): each such write stays open for the rest of the history, and the linearizability
    search grows with every one, so none is left open that need not be."""
    return (
        error.code is ErrorCode.INVALID_UPDATE_VERSION
        or error.details.get("appended") is False
        or error.details.get("sent") is False
    )


async def _run(layout: ClusterLayout, history: HistoryWriter, end: RunEnd, rng: random.Random) -> dict[str, int]:
    counts = {"ok": 0, "fail": 0, "info": 0}
    by_id = {n.node_id: (n.host, n.port) for n in layout.nodes if "controller" in n.roles}
    addresses = list(by_id.values())
    credential_path = layout.secrets_dir / ADMIN_FILE
    credential = load_credential(credential_path) if credential_path.exists() else None
    client = RpcClient(request_timeout_ms=OP_TIMEOUT_MS, credential=credential)
    leader: dict[str, Any] = {"address": rng.choice(addresses)}
    next_process = PROCESSES

    def note_leader(error: KafkaError) -> None:
        leader["address"] = by_id.get(error.details.get("leader_id")) or rng.choice(addresses)

    async def one(process: int) -> None:
        nonlocal next_process
        while not end.passed():
            f = rng.choice(("read", "write", "cas"))
            value: Any = None if f == "read" else rng.randrange(VALUES)
            if f == "cas":
                value = [rng.randrange(VALUES), value]
            history.event(process, "invoke", f, value=value)
            try:
                if f == "read":
                    answer = await client.call(rng.choice(addresses), "/controller/register_read", {"key": KEY})
                    value = answer.get("value")
                else:
                    body = {"key": KEY, "value": value[1] if f == "cas" else value}
                    if f == "cas":
                        body["from"] = value[0]
                    await client.call(leader["address"], "/controller/register_write", body)
            except KafkaError as exc:
                if exc.code is ErrorCode.NOT_CONTROLLER:
                    note_leader(exc)
                definite = f == "read" or never_took_effect(exc)
                counts["fail" if definite else "info"] += 1
                history.event(process, "fail" if definite else "info", f, value=value, error=exc.code.name)
                if not definite:  # the write may still take effect: this process may not invoke again
                    process, next_process = next_process, next_process + 1
            else:
                counts["ok"] += 1
                history.event(process, "ok", f, value=value)
            await asyncio.sleep(PAUSE_S)

    try:
        await asyncio.gather(*(one(p) for p in range(PROCESSES)))
    finally:
        await client.close()
    return counts


async def _beside(beside: Beside) -> dict[str, int]:
    await run_register(beside.cluster.layout, beside.cluster.out, end=beside.end, rng=beside.rng)
    return {}  # its operations are in register.jsonl; the faults are the nemesis's


# Beside the queue workload's producers: the run's topic and its judges stay as they are.
WORKLOAD = Workload(make=queue.make, beside=_beside, judge=judge)
