"""In-memory stand-ins for the Raft component, the node and its RPC client (used by the shell tests).

FakeRaft keeps the raft component's API (register_listener,
schedule_atomic_append, create_snapshot, leader_id, epoch, is_leader,
high_watermark, status) over a list of entries, and commits only when a
test says so. Electing a leader appends a leader-change control entry, which
listeners never see, so offsets have gaps as in the real log.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kraftpy.node.config import build_config
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.raft.log import OffsetAndEpoch


@dataclass(frozen=True)
class CommittedBatch:
    base_offset: int
    last_offset: int
    epoch: int
    records: list[bytes]


@dataclass
class FakeEntry:
    offset: int
    epoch: int
    data: bytes
    control: bool
    batch: int  # entries of one atomic append share this


class FakeRaft:
    name = "raft"

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.listeners: list[Any] = []
        self.entries: list[FakeEntry] = []
        self.delivered = 0  # entries handed to listeners (or skipped as control)
        self.epoch = 0
        self.leader_id: int | None = None
        self.snapshots: list[tuple[OffsetAndEpoch, bytes]] = []
        self.fail_appends: ErrorCode | None = None
        self.reads: list[asyncio.Future[int]] = []
        self._batches = 0

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.node_id

    @property
    def high_watermark(self) -> int:
        return self.delivered

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    def register_listener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def schedule_atomic_append(self, epoch: int, records: list[bytes]) -> int:
        if not self.is_leader or epoch != self.epoch:
            raise KafkaError(f"not leader of epoch {epoch}", ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=self.leader_id)
        if self.fail_appends is not None:
            raise KafkaError("refused", self.fail_appends)
        self._batches += 1
        for data in records:
            self.entries.append(FakeEntry(len(self.entries), epoch, data, False, self._batches))
        return len(self.entries) - 1

    def write_committed(self, records: list[bytes]) -> None:
        """Entries some leader wrote and the quorum committed (as an observer or follower sees them)."""
        self._batches += 1
        for data in records:
            self.entries.append(FakeEntry(len(self.entries), self.epoch, data, False, self._batches))
        self.commit()

    def elect(self, leader_id: int | None, epoch: int | None = None) -> None:
        """A new epoch. This node's own leadership is announced, as the real component does, only
        after the listeners applied everything up to the epoch's leader-change entry."""
        self.epoch = self.epoch + 1 if epoch is None else epoch
        self.leader_id = leader_id
        if leader_id is not None:
            self._batches += 1
            self.entries.append(FakeEntry(len(self.entries), self.epoch, b"", True, self._batches))
            if leader_id == self.node_id:
                self.commit()
        for listener in self.listeners:
            listener.handle_leader_change(leader_id, self.epoch)

    def commit(self, up_to: int | None = None) -> None:
        """Deliver committed entries up to offset `up_to` (all by default), one call per atomic append."""
        end = len(self.entries) if up_to is None else up_to + 1
        while self.delivered < end:
            first = self.entries[self.delivered]
            group = [e for e in self.entries[self.delivered : end] if e.batch == first.batch]
            self.delivered += len(group)
            if first.control:
                continue
            batch = CommittedBatch(group[0].offset, group[-1].offset, first.epoch, [e.data for e in group])
            for listener in self.listeners:
                listener.handle_commit(batch)

    def drop_uncommitted(self) -> None:
        del self.entries[self.delivered :]

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        self.snapshots.append((snapshot_id, payload))

    async def read_barrier(self, timeout_ms: int) -> int:
        """Raft's read index: waits until the test confirms (`confirm_reads`) or fails (`fail_reads`) the round."""
        if not self.is_leader:
            raise KafkaError("not the leader", ErrorCode.NOT_LEADER_OR_FOLLOWER, leader_id=self.leader_id)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.reads.append(future)
        return await future

    def confirm_reads(self) -> None:
        """A quorum confirmed the leadership: the reads' index is the committed end, already applied here."""
        for future in self.reads:
            future.set_result(self.delivered)
        self.reads.clear()

    def fail_reads(self, error: ErrorCode) -> None:
        for future in self.reads:
            future.set_exception(KafkaError(f"read barrier: {error.name}", error, leader_id=self.leader_id))
        self.reads.clear()

    def replay_to(self, listener: Any) -> None:
        """What the real component does on start: the latest snapshot, then the committed log after it."""
        committed_end = self.delivered
        start = 0
        if self.snapshots:
            snapshot_id, payload = self.snapshots[-1]
            listener.handle_load_snapshot(snapshot_id, payload)
            start = snapshot_id.offset
        saved, self.listeners, self.delivered = self.listeners, [listener], start
        self.commit(committed_end - 1)
        self.listeners = saved

    def status(self) -> dict[str, Any]:
        return {
            "leader_id": self.leader_id,
            "epoch": self.epoch,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset,
            "voters": [
                {"node_id": self.node_id, "log_end_offset": self.log_end_offset, "last_fetch_ms_ago": 0},
                {"node_id": 2, "log_end_offset": self.log_end_offset - 1, "last_fetch_ms_ago": 40},
            ],
            "observers": [{"node_id": 7, "log_end_offset": 0, "last_fetch_ms_ago": None}],
        }


class FakeRpc:
    """node.rpc for broker tests: answers come from `respond(address, path, body)`."""

    def __init__(self, respond: Callable[[tuple[str, int], str, dict], dict]) -> None:
        self.respond = respond
        self.calls: list[tuple[tuple[str, int], str, dict]] = []

    async def call(self, address: tuple[str, int], path: str, body: dict, **kwargs: Any) -> dict:
        self.calls.append((address, path, body))
        return self.respond(address, path, body)


class FakeNode:
    def __init__(self, node_id: int, data_dir: Path, *, roles: str = "broker,controller", **settings: Any) -> None:
        self.config = build_config(
            {
                "node_id": node_id,
                "process_roles": roles,
                "controller_quorum_voters": "1@127.0.0.1:9001,2@127.0.0.1:9002,3@127.0.0.1:9003",
                "data_dir": str(data_dir),
                "port": 9000 + node_id,
                **settings,
            }
        )
        self.cluster_id = "test-cluster"
        self.rpc: Any = None
        self.components: dict[str, Any] = {}

    def component(self, name: str) -> Any:
        if name not in self.components:
            raise LookupError(name)
        return self.components[name]


def test_fake_raft_delivers_one_batch_per_append_and_skips_control_entries(tmp_path: Path) -> None:
    raft = FakeRaft(1)
    seen: list[CommittedBatch] = []

    class Listener:
        def handle_commit(self, batch: CommittedBatch) -> None:
            seen.append(batch)

        def handle_leader_change(self, leader_id: int | None, epoch: int) -> None:
            pass

    raft.register_listener(Listener())
    raft.elect(1)
    assert raft.schedule_atomic_append(1, [b"a", b"b"]) == 2
    assert raft.schedule_atomic_append(1, [b"c"]) == 3
    raft.commit()
    assert [(b.base_offset, b.last_offset, b.records) for b in seen] == [(1, 2, [b"a", b"b"]), (3, 3, [b"c"])]
    with pytest.raises(KafkaError):
        raft.schedule_atomic_append(2, [b"x"])
