"""Real node processes for the Raft integration tests and benchmarks/raft_bench.py.

`ProcCluster` formats N data dirs of one cluster, writes each node's TOML,
starts `python -m tests.integration.raft_kv_node` processes on 127.0.0.1 ports,
signals them by pid and talks to them over the nodes' CBOR routes. Every
wait is bounded; `close()` ends every process it started (SIGTERM, then
SIGKILL) by pid.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kraftpy.node import meta_properties
from kraftpy.node.config import Voter, build_config
from kraftpy.protocol.credentials import NODE_FILE
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.credential_files import create_cluster_secrets, load_credential
from kraftpy.protocol.shell.rpc import RpcClient
from tests.ports import PortReservation

REPO_ROOT = Path(__file__).resolve().parents[2]

# The timeouts `kraftpy cluster start` uses (docs/operations.md), in the node's config names.
LOCAL_TIMEOUTS: dict[str, Any] = {
    "controller_quorum_election_timeout_ms": 300,
    "controller_quorum_fetch_timeout_ms": 600,
    "controller_quorum_election_backoff_max_ms": 300,
    "controller_quorum_request_timeout_ms": 1000,
}


class ProcCluster:
    def __init__(
        self, root: Path, *, nodes: int = 3, settings: dict[str, Any] | None = None, client_streams: bool = False
    ) -> None:
        """`client_streams`: this process calls the nodes over one RPC stream per node (as the nodes call
        each other) instead of one HTTP request per call."""
        self.root = Path(root)
        self.cluster_id = meta_properties.random_cluster_id()
        self._ports = PortReservation(nodes)  # held until close: a restarted node binds its port again
        self.ports = {i + 1: port for i, port in enumerate(self._ports.ports)}
        self.settings = {**LOCAL_TIMEOUTS, **(settings or {})}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        # The nodes accept only signed cluster-internal calls (docs/security.md); /kv/* is one of them.
        self.secrets_dir = self.root / "secrets"
        create_cluster_secrets(self.secrets_dir)
        credential = load_credential(self.secrets_dir / NODE_FILE)
        self.rpc = RpcClient(
            request_timeout_ms=3000, connect_timeout_ms=500, credential=credential, peer_streams=client_streams
        )
        voters = ",".join(str(Voter(i, "127.0.0.1", p)) for i, p in self.ports.items())
        for node_id, port in self.ports.items():
            config = build_config(
                {
                    "node_id": node_id,
                    "process_roles": "controller",
                    "host": "127.0.0.1",
                    "port": port,
                    "controller_quorum_voters": voters,
                    "data_dir": str(self.data_dir(node_id)),
                    "log_level": "INFO",
                    "secrets_dir": str(self.secrets_dir),
                    **self.settings,
                }
            )
            self.node_dir(node_id).mkdir(parents=True, exist_ok=True)
            self.config_path(node_id).write_text(config.to_toml())
            meta_properties.write(self.data_dir(node_id), meta_properties.MetaProperties(self.cluster_id, node_id))

    def node_dir(self, node_id: int) -> Path:
        return self.root / f"node{node_id}"

    def data_dir(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "data"

    def config_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "node.toml"

    def log_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "node.log"

    def address(self, node_id: int) -> tuple[str, int]:
        return ("127.0.0.1", self.ports[node_id])

    # ---- processes --------------------------------------------------------------------------

    def start(self, node_id: int) -> subprocess.Popen[bytes]:
        old = self.procs.get(node_id)
        if old is not None and old.poll() is None:
            raise RuntimeError(f"node {node_id} is running (pid {old.pid})")
        with open(self.log_path(node_id), "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tests.integration.raft_kv_node", "--config", str(self.config_path(node_id))],
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs[node_id] = proc
        return proc

    def start_all(self) -> None:
        for node_id in self.ports:
            self.start(node_id)

    def signal(self, node_id: int, sig: int) -> None:
        proc = self.procs[node_id]
        if proc.poll() is None:
            os.kill(proc.pid, sig)

    def wait_exit(self, node_id: int, timeout_s: float = 10.0) -> int:
        return self.procs[node_id].wait(timeout=timeout_s)

    def kill(self, node_id: int) -> None:
        """SIGKILL, as a crash: no resignation, no flush, no checkpoint."""
        self.signal(node_id, signal.SIGKILL)
        self.wait_exit(node_id)

    def alive(self) -> list[int]:
        return [i for i, p in self.procs.items() if p.poll() is None]

    async def close(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        await self.rpc.close()
        self._ports.release()

    # ---- talking to nodes -------------------------------------------------------------------

    async def call(self, node_id: int, path: str, body: dict[str, Any], timeout_ms: int = 3000) -> dict[str, Any]:
        return await self.rpc.call(self.address(node_id), path, body, timeout_ms=timeout_ms)

    async def state(self, node_id: int, timeout_ms: int = 1000) -> dict[str, Any] | None:
        try:
            return await self.call(node_id, "/kv/state", {}, timeout_ms)
        except KafkaError:
            return None

    async def leader(self, among: list[int] | None = None) -> int | None:
        """The node that says it leads, if exactly one of the live ones does and every one of them
        names it, in the same epoch. A leader that only some know of can still be unseated: a voter
        that voted for it but has not heard its BeginQuorumEpoch yet grants another node's pre-vote
        (it knows no live leader), and that node's real election moves the leader to the next epoch."""
        ids = among if among is not None else self.alive()
        states = await asyncio.gather(*(self.state(i) for i in ids))
        leaders = [i for i, s in zip(ids, states, strict=True) if s and s["raft"].get("state") == "leader"]
        if len(leaders) != 1:
            return None
        named = {(s["raft"].get("leader_id"), s["raft"].get("epoch")) if s else None for s in states}
        return leaders[0] if len(named) == 1 and next(iter(named))[0] == leaders[0] else None

    async def wait_leader(self, timeout_s: float = 20.0, among: list[int] | None = None) -> int:
        async with asyncio.timeout(timeout_s):
            while True:
                leader = await self.leader(among)
                if leader is not None:
                    return leader
                await asyncio.sleep(0.02)

    async def append(self, node_id: int, records: list[bytes], *, separate: bool = False) -> dict[str, Any]:
        return await self.call(node_id, "/kv/append", {"records": records, "separate": separate}, 10_000)

    async def wait_applied(self, node_id: int, offset: int, timeout_s: float = 20.0) -> dict[str, Any]:
        """Wait until `node_id` has applied everything below `offset`; returns its state."""
        async with asyncio.timeout(timeout_s):
            while True:
                state = await self.state(node_id)
                if state is not None and state["applied_offset"] >= offset:
                    return state
                await asyncio.sleep(0.02)

    def log_tail(self, node_id: int, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path(node_id).read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"
