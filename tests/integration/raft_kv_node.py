"""A test-only node: the Raft component plus a tiny replicated state machine, run as a real process.

    python -m tests.integration.raft_kv_node --config node.toml      (from the repo root)

It is `kraftpy server` with the component list replaced by the Raft
component and `kv` below, so the quorum can be exercised (integration tests,
benchmarks/raft_bench.py) before and independently of the controller. Nothing
here is on the product's default path.

The state machine folds every committed record into a count and a SHA-256
chain; its snapshot is that pair. Routes (CBOR over HTTP, like every node API):

* /kv/append {records: [bytes], separate: bool} -> {last_offset, commit_us: [..]}:
  one atomic append, or (separate) one append per record, all in flight at
  once; answers once committed and applied here, with each append's commit
  latency measured in this process.
* /kv/state -> {applied_offset, count, digest, loaded_snapshots, raft: status}
* /kv/snapshot -> {snapshot_id}: snapshot the state machine where it stands and trim.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from typing import Any

import cbor2

from kraftpy.node import process as node_module
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.shell.component import CommittedBatch, RaftComponent

APPEND_TIMEOUT_MS = 5000
MAX_RECORDS_PER_CALL = 10_000


class ChainMachine:
    def __init__(self) -> None:
        self.count = 0
        self.digest = b"\x00" * 32
        self.next_offset = 0
        self.last_epoch = 0
        self.loaded_snapshots = 0
        self.leader: tuple[int | None, int] = (None, 0)

    def handle_commit(self, batch: CommittedBatch) -> None:
        h = self.digest
        for record in batch.records:
            h = hashlib.sha256(h + record).digest()
        self.digest = h
        self.count += len(batch.records)
        self.next_offset = batch.last_offset + 1
        self.last_epoch = batch.epoch

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        body = cbor2.loads(payload)
        self.count, self.digest = body["count"], body["digest"]
        self.next_offset, self.last_epoch = snapshot_id.offset, snapshot_id.epoch
        self.loaded_snapshots += 1

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
        self.leader = (leader_id, epoch)


class KvComponent:
    name = "kv"

    def __init__(self, raft: RaftComponent) -> None:
        self.raft = raft
        self.machine = ChainMachine()
        raft.register_listener(self.machine)

    def routes(self) -> dict[str, Any]:
        return {"/kv/append": self._append, "/kv/state": self._state, "/kv/snapshot": self._snapshot}

    async def start(self) -> None:
        pass

    async def stop(self, graceful: bool) -> None:
        pass

    def status(self) -> dict[str, Any]:
        return {"count": self.machine.count, "applied_offset": self.raft.applied_offset}

    async def _append(self, body: dict[str, Any]) -> dict[str, Any]:
        records = body.get("records")
        if not isinstance(records, list) or not records or len(records) > MAX_RECORDS_PER_CALL:
            raise KafkaError(f"records: a list of 1 to {MAX_RECORDS_PER_CALL} byte strings", ErrorCode.INVALID_REQUEST)
        if not all(isinstance(r, bytes) for r in records):
            raise KafkaError("records must be byte strings", ErrorCode.INVALID_REQUEST)
        if not body.get("separate"):
            start = time.perf_counter_ns()
            last = await self.raft.append_and_wait(records, APPEND_TIMEOUT_MS)
            return {"last_offset": last, "commit_us": [(time.perf_counter_ns() - start) // 1000]}

        async def one(record: bytes) -> int:
            start = time.perf_counter_ns()
            await self.raft.append_and_wait([record], APPEND_TIMEOUT_MS)
            return (time.perf_counter_ns() - start) // 1000

        results = await asyncio.gather(*(one(r) for r in records), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            first = errors[0]
            if isinstance(first, KafkaError):
                raise first
            raise KafkaError(f"append failed: {first!r}", ErrorCode.UNKNOWN_SERVER_ERROR)
        return {"last_offset": -1, "commit_us": results}

    async def _state(self, body: dict[str, Any]) -> dict[str, Any]:
        m = self.machine
        return {
            "applied_offset": self.raft.applied_offset,
            "count": m.count,
            "digest": m.digest,
            "loaded_snapshots": m.loaded_snapshots,
            "leader": list(m.leader),
            "raft": self.raft.status(),
        }

    async def _snapshot(self, body: dict[str, Any]) -> dict[str, Any]:
        m = self.machine
        if m.next_offset == 0:
            raise KafkaError("nothing applied yet", ErrorCode.INVALID_REQUEST)
        # entry next_offset - 1 is the last record applied, of the last batch's epoch
        snapshot_id = OffsetAndEpoch(m.next_offset, m.last_epoch)
        self.raft.create_snapshot(snapshot_id, cbor2.dumps({"count": m.count, "digest": m.digest}))
        return {"snapshot_id": list(snapshot_id)}


def create_kv(node: Any) -> KvComponent:
    return KvComponent(node.component("raft"))


def main() -> None:
    node_module.COMPONENT_FACTORIES[:] = [
        "kraftpy.raft.shell.component:create_raft_component",
        "tests.integration.raft_kv_node:create_kv",
    ]
    from kraftpy.tools.cli import main as cli_main

    sys.argv = ["kraftpy", "server", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
