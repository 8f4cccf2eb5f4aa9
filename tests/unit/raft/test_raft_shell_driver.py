"""The Raft shell's order of work within one input, on a real durable log: what a follower that
fsyncs in its event loop does first once its fsync is done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kraftpy.protocol.errors import ErrorCode
from kraftpy.raft.actions import AppendResolved, ReadResolved, RoleChanged
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import Entry, OffsetAndEpoch
from kraftpy.raft.messages import BeginQuorumEpochRequest, FetchRequest, FetchResponse, Message
from kraftpy.raft.quorum_state import QuorumState
from kraftpy.raft.shell.driver import RaftShell
from kraftpy.raft.shell.durable_log import DurableLog

CLUSTER = "driver-test"


class Recorder:
    """The shell's listener and its `send`, writing one timeline."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.fetches: list[FetchRequest] = []

    def send(self, message: Message) -> None:
        if isinstance(message, FetchRequest):
            self.fetches.append(message)
            self.events.append(("fetch", message.fetch_offset))

    def on_commit(self, high_watermark: int) -> None:
        self.events.append(("commit", high_watermark))

    def on_install(self, snapshot_id: OffsetAndEpoch) -> None:
        self.events.append(("install", snapshot_id))

    def on_role(self, change: RoleChanged, log_end_offset: int) -> None:
        self.events.append(("role", change.role))

    def on_append_resolved(self, resolved: AppendResolved) -> None:
        pass

    def on_read_resolved(self, resolved: ReadResolved) -> None:
        pass

    def on_fatal(self, error: BaseException) -> None:
        self.events.append(("fatal", error))


def answer(fetch: FetchRequest, high_watermark: int, *entries: Entry) -> FetchResponse:
    return FetchResponse(
        CLUSTER,
        1,
        2,
        fetch.correlation_id,
        1,
        1,
        ErrorCode.NONE,
        fetch.fetch_offset,
        high_watermark,
        entries,
        None,
        None,
        0,
    )


async def test_an_in_loop_fsync_sends_the_acknowledging_fetch_before_the_listener_applies(tmp_path: Path) -> None:
    """The fetch that acknowledges what a follower just fsynced is on the commit's critical path;
    applying the high watermark that came with those entries is not. So on a follower that fsyncs
    in its loop the fetch leaves inside the same input, before the listener hears of the commit
    (and before the shell goes back to the loop)."""
    recorder = Recorder()
    log = DurableLog.open(tmp_path / "log")
    shell = RaftShell(
        node_id=2,
        voters=frozenset({1, 2, 3}),
        cluster_id=CLUSTER,
        log_dir=tmp_path,
        durable_log=log,
        quorum_state=QuorumState(),
        config=RaftConfig(),
        send=recorder.send,
        listener=recorder,
        follower_flush_in_loop=True,
    )
    try:
        shell.handle(BeginQuorumEpochRequest(CLUSTER, 1, 2, 1, 1, 1))
        assert recorder.fetches[-1].fetch_offset == 0, "following node 1: it fetches from the start"
        shell.handle(answer(recorder.fetches[-1], 0, Entry(0, 1, b"a"), Entry(1, 1, b"b")))
        assert recorder.fetches[-1].fetch_offset == 2, "fsynced and acknowledged within the same input"
        recorder.events.clear()
        shell.handle(answer(recorder.fetches[-1], 2, Entry(2, 1, b"c")))
        assert recorder.events == [("fetch", 3), ("commit", 2)]
        assert log.end_offset == 3 and shell.flushes == 2
    finally:
        await shell.close()
        log.close()
