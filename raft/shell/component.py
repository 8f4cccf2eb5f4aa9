"""RaftComponent: the node's Raft quorum member (voter) or observer, and the API the controller codes against.

Design notes: docs/raft.md, section "raft/shell/component.py".
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.shell.rpc import Handler, RpcClient
from kraftpy.protocol.types import Address, format_address
from kraftpy.raft.actions import AppendResolved, ReadResolved, RoleChanged
from kraftpy.raft.commit_delivery import CommitDelivery, CommittedBatch, LeaderChange
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.messages import Message, is_request
from kraftpy.raft.node import NotLeaderError
from kraftpy.raft.quorum_state import QuorumState, Role
from kraftpy.raft.shell import quorum_state_file
from kraftpy.raft.shell.driver import RaftShell
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR, DurableLog
from kraftpy.raft.shell.peer_client import PeerClient
from kraftpy.raft.shell.transport import RaftRoutes


class Node(Protocol):
    """What the node process (kraftpy.node.process.Node) gives the components it wires; raft sits below it."""

    config: Any  # kraftpy.node.config.NodeConfig
    cluster_id: str
    rpc: RpcClient

    def request_stop(self) -> None: ...


log = logging.getLogger(__name__)

APPLY_SLICE_BYTES = 4 * 1024 * 1024  # applied per loop turn; a long replay yields between slices
RESIGN_WAIT_MS = 1000  # how long a graceful stop waits for its EndQuorumEpoch to be delivered


class RaftListener(Protocol):  # KRaft's RaftClient.Listener
    def handle_commit(self, batch: CommittedBatch) -> None: ...

    def handle_load_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None: ...

    def handle_leader_change(self, leader_id: int | None, epoch: int) -> None: ...


def raft_config_from(config: Any) -> RaftConfig:
    """The core's settings from the node's KRaft-named ones."""
    fetch_timeout = config.controller_quorum_fetch_timeout_ms
    return RaftConfig(
        election_timeout_ms=config.controller_quorum_election_timeout_ms,
        election_backoff_max_ms=config.controller_quorum_election_backoff_max_ms,
        fetch_timeout_ms=fetch_timeout,
        request_timeout_ms=config.controller_quorum_request_timeout_ms,
        append_linger_ms=config.controller_quorum_append_linger_ms,
        # A parked fetch is answered at least 4 times per fetch timeout, as KRaft's 500 ms vs
        # 2000 ms: a healthy follower never comes near its timeout between two answers.
        fetch_max_wait_ms=min(500, max(1, fetch_timeout // 4)),
    )


def follower_flush_in_loop(process_roles: Sequence[str]) -> bool:
    """Whether a follower fsyncs the metadata log in the event loop (no thread hand-off on the
    commit's path). Only on a dedicated controller: there the loop serves the quorum and the
    controller's routes, and while a follower's fsync runs the follower has nothing else to do
    for the quorum, as in KRaft's Raft thread. A node that is also a broker keeps the flush
    thread: its loop serves Kafka clients, which a slow fsync must not stop."""
    return "broker" not in process_roles


class RaftComponent:
    name = "raft"

    def __init__(
        self,
        *,
        node_id: int,
        cluster_id: str,
        data_dir: Path,
        voters: Mapping[int, Address],
        config: RaftConfig,
        rpc: RpcClient,
        on_fatal: Callable[[], None] | None = None,
        seed: int | None = None,
        follower_flush_in_loop: bool = False,
    ) -> None:
        self.node_id = node_id
        self.follower_flush_in_loop = follower_flush_in_loop
        self.cluster_id = cluster_id
        self.data_dir = Path(data_dir)
        self.log_dir = self.data_dir / METADATA_LOG_DIR
        self.voters = dict(voters)
        self.config = config
        self._rpc = rpc
        self._on_fatal = on_fatal
        self._rng = random.Random(seed)
        self._listeners: list[RaftListener] = []
        self._log: DurableLog | None = None
        self._shell: RaftShell | None = None
        self._peers: PeerClient | None = None
        self._routes = RaftRoutes(
            node_id=node_id,
            cluster_id=cluster_id,
            deliver=self._deliver,
            request_timeout_ms=config.request_timeout_ms,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            screen=self._screen,
        )
        self._delivery = CommitDelivery(node_id)
        self._apply_scheduled = False
        self._applying = False
        self._appends: dict[tuple[int, int], asyncio.Future[int]] = {}
        self._reads: dict[int, asyncio.Future[int]] = {}
        # Reads the core resolved while read_index() was still running (a single voter confirms its
        # own leadership at once), before read_barrier could register a future for them.
        self._issuing_read = False
        self._resolved_early: dict[int, ReadResolved] = {}
        self._after_apply: list[tuple[int, int, int, asyncio.Future[int]]] = []  # (offset needed, seq, value, fut)
        self._seq = 0

    @classmethod
    def from_node(cls, node: Node) -> RaftComponent:
        return cls(
            node_id=node.config.node_id,
            cluster_id=node.cluster_id,
            data_dir=node.config.data_dir,
            voters=node.config.voter_addresses(),
            config=raft_config_from(node.config),
            rpc=node.rpc,
            on_fatal=node.request_stop,
            follower_flush_in_loop=follower_flush_in_loop(node.config.process_roles),
        )

    # ---- Component protocol -------------------------------------------------------------------

    def routes(self) -> Mapping[str, Handler]:
        return self._routes.routes()

    async def start(self) -> None:
        self._log = DurableLog.open(self.log_dir)
        try:
            state = quorum_state_file.read(self.log_dir, self.cluster_id)
            if state is None:
                if self._log.end_offset > 0 or self._log.latest_snapshot() is not None:
                    raise KafkaError(
                        f"{self.log_dir} holds a Raft log but no {quorum_state_file.FILE_NAME} file: this node's "
                        "vote is lost and it could vote twice in an epoch; restore the file or reformat the node",
                        ErrorCode.KAFKA_STORAGE_ERROR,
                    )
                state = QuorumState()
            self._replay_on_start()
        except BaseException:
            self._log.close()
            self._log = None
            raise
        self._peers = PeerClient(
            node_id=self.node_id,
            rpc=self._rpc,
            addresses=self.voters,
            deliver=self._deliver,
            current_epoch=lambda: self.epoch,
            request_timeout_ms=self.config.request_timeout_ms,
        )
        self._routes.open = True
        self._shell = RaftShell(
            node_id=self.node_id,
            voters=frozenset(self.voters),
            cluster_id=self.cluster_id,
            log_dir=self.log_dir,
            durable_log=self._log,
            quorum_state=state,
            config=self.config,
            send=self._send,
            listener=self,
            rng=self._rng,
            follower_flush_in_loop=self.follower_flush_in_loop,
        )
        log.info(
            "raft %s %d started: epoch %d, log [%d, %d), applied %d",
            "voter" if self.node_id in self.voters else "observer",
            self.node_id,
            self.epoch,
            self._log.log_start_offset,
            self._log.end_offset,
            self._delivery.applied,
        )

    async def stop(self, graceful: bool) -> None:
        shell = self._shell
        if graceful and shell is not None and shell.failed is None and self.is_leader:
            await self.resign()
        self._routes.close()
        if shell is not None:
            await shell.close()
        if self._peers is not None:
            await self._peers.close()
        self._fail_waiters(KafkaError("the Raft layer stopped", ErrorCode.NOT_LEADER_OR_FOLLOWER))
        if self._log is not None:
            self._log.close()
            self._log = None

    def status(self) -> dict[str, Any]:
        shell = self._shell
        if shell is None or self._log is None:
            return {"state": "stopped", "leader_id": None, "epoch": 0}
        core = shell.core
        now = shell.now_ms
        progress, observers = core.replica_progress()

        def replica(node_id: int, p: Any) -> dict[str, Any]:
            if node_id == self.node_id:
                return {"node_id": node_id, "log_end_offset": self._log.end_offset if self._log else None}
            if p is None:
                return {"node_id": node_id, "log_end_offset": None, "last_fetch_ms_ago": None}
            return {"node_id": node_id, "log_end_offset": p.end_offset, "last_fetch_ms_ago": now - p.last_fetch_ms}

        return {
            "node_id": self.node_id,
            "leader_id": self.leader_id,
            "epoch": core.epoch,
            "state": "failed" if shell.failed else core.role.value,
            "is_voter": self.node_id in self.voters,
            "high_watermark": core.high_watermark,
            "applied_offset": self._delivery.applied,
            "log_start_offset": self._log.log_start_offset,
            "log_end_offset": self._log.end_offset,
            "latest_snapshot": list(self._log.latest_snapshot() or ()) or None,
            "voters": [replica(v, progress.get(v)) for v in sorted(self.voters)],
            "observers": [replica(o, p) for o, p in sorted(observers.items())],
            "storage": shell.stall_status(),
        }

    # ---- the API --------------------------------------------------------------------------------

    def register_listener(self, listener: RaftListener) -> None:
        if self._shell is not None:
            raise RuntimeError("register Raft listeners before the component starts")
        self._listeners.append(listener)

    @property
    def leader_id(self) -> int | None:
        if self._shell is None:
            return None
        core = self._shell.core
        if core.role is Role.RESIGNED or (core.leader_id == self.node_id and core.role is not Role.LEADER):
            return None
        return core.leader_id

    @property
    def leader_address(self) -> str | None:
        """ "host:port" of the leader, from the voter list, if one is known."""
        leader = self.leader_id
        if leader is None or leader not in self.voters:
            return None
        return format_address(*self.voters[leader])

    @property
    def epoch(self) -> int:
        return self._shell.core.epoch if self._shell is not None else 0

    @property
    def high_watermark(self) -> int:
        return self._shell.core.high_watermark if self._shell is not None else 0

    @property
    def applied_offset(self) -> int:
        """The next offset the listeners will apply (everything below it is applied)."""
        return self._delivery.applied

    @property
    def is_leader(self) -> bool:
        return self._shell is not None and self._shell.core.role is Role.LEADER

    def _running_shell(self) -> RaftShell:
        shell = self._shell
        if shell is None or shell.failed is not None or shell.stopped:
            raise KafkaError(f"node {self.node_id}: the Raft layer is not running", ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return shell

    def schedule_atomic_append(self, epoch: int, records: list[bytes]) -> int:
        """Append `records` as one batch (leader of `epoch` only); returns the last offset.

        Raises KafkaError NOT_LEADER_OR_FOLLOWER with details leader_id / leader_address / epoch when this
        node is not the leader of `epoch`; NOT_ENOUGH_REPLICAS (retriable) when too much is
        uncommitted; RECORD_LIST_TOO_LARGE above max_batch_bytes. The commit is reported
        through the listeners' handle_commit."""
        shell = self._running_shell()
        core = shell.core
        if core.role is not Role.LEADER or core.epoch != epoch:
            raise NotLeaderError(
                f"node {self.node_id} is not the leader of epoch {epoch} (epoch {core.epoch}, leader {self.leader_id})",
                leader_id=self.leader_id,
                leader_address=self.leader_address,
                epoch=core.epoch,
            )
        _, _, last = shell.append(list(records))
        return last

    async def append_and_wait(self, records: list[bytes], timeout_ms: int) -> int:
        """Append as the current leader; resolves with the last offset once committed and applied here."""
        epoch = self.epoch
        last = self.schedule_atomic_append(epoch, records)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._appends[(epoch, last)] = future
        try:
            return await self._bounded(future, timeout_ms, "append")
        finally:
            self._appends.pop((epoch, last), None)

    async def read_barrier(self, timeout_ms: int) -> int:
        """A linearizable read index (leader only): resolves once the leader confirmed its
        leadership after the call and the local state machine applied everything below it."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._issuing_read = True
        try:
            read_id = self._running_shell().read_index()
        except BaseException:
            self._resolved_early.clear()
            raise
        finally:
            self._issuing_read = False
        early = self._resolved_early.pop(read_id, None)
        self._resolved_early.clear()
        self._reads[read_id] = future
        if early is not None:
            self.on_read_resolved(early)
        try:
            return await self._bounded(future, timeout_ms, "read barrier")
        finally:
            self._reads.pop(read_id, None)

    async def _bounded(self, future: asyncio.Future[int], timeout_ms: int, what: str) -> int:
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                return await future
        except TimeoutError:
            raise KafkaError(f"{what} not done within {timeout_ms} ms", ErrorCode.REQUEST_TIMED_OUT) from None

    def create_snapshot(self, snapshot_id: OffsetAndEpoch, payload: bytes) -> None:
        """Store the state machine's image at `snapshot_id` (a committed, applied offset) durably in
        LMDB and trim the log behind it. The id must be `(offset, epoch of entry offset-1)`."""
        shell = self._running_shell()
        log_ = self._log
        assert log_ is not None
        snapshot_id = OffsetAndEpoch(*snapshot_id)
        offset = snapshot_id.offset
        if offset > self._delivery.applied or offset > shell.core.high_watermark:
            raise KafkaError(
                f"snapshot {tuple(snapshot_id)} is past what is committed and applied here "
                f"(applied {self._delivery.applied}, high watermark {shell.core.high_watermark})",
                ErrorCode.INVALID_REQUEST,
            )
        if offset <= log_.log_start_offset:
            return  # the log already starts there or later: an older image adds nothing
        try:
            expected = shell.core.snapshot_id_at(offset)
        except ValueError as exc:
            raise KafkaError(f"snapshot {tuple(snapshot_id)}: {exc}", ErrorCode.INVALID_REQUEST) from None
        if expected != snapshot_id:
            raise KafkaError(
                f"snapshot id {tuple(snapshot_id)} does not match the log: entry {offset - 1} has epoch "
                f"{expected.epoch}",
                ErrorCode.INVALID_REQUEST,
            )
        log_.create_snapshot(snapshot_id, payload)
        shell.snapshot_created(snapshot_id)

    async def resign(self) -> None:
        """Graceful: stop leading and ask the most caught-up voter to run (EndQuorumEpoch); returns
        once the requests were delivered or RESIGN_WAIT_MS passed."""
        shell = self._running_shell()
        if shell.core.role is not Role.LEADER:
            return
        epoch = shell.core.epoch
        shell.resign()
        delivered = True
        if self._peers is not None:
            delivered = await self._peers.flush_control(min(RESIGN_WAIT_MS, self.config.request_timeout_ms))
        log.info(
            "node %d resigned the leadership of epoch %d; EndQuorumEpoch %s",
            self.node_id,
            epoch,
            "delivered" if delivered else "not delivered to every voter in time",
        )

    # ---- transport glue -------------------------------------------------------------------------

    def _screen(self, message: Message) -> KafkaError | None:
        return None if self._shell is None else self._shell.core.screen(message)

    def _deliver(self, message: Message) -> None:
        if self._shell is not None:
            self._shell.handle(message)

    def _send(self, message: Message) -> None:
        if is_request(message):
            if self._peers is not None:
                self._peers.send(message)
        else:
            self._routes.answer(message)

    # ---- ShellListener ------------------------------------------------------------------------

    def on_commit(self, high_watermark: int) -> None:
        self._delivery.committed(high_watermark)
        self._apply()

    def on_install(self, snapshot_id: OffsetAndEpoch) -> None:
        assert self._log is not None
        payload = self._log.snapshot_data(snapshot_id)
        for listener in self._listeners:
            listener.handle_load_snapshot(snapshot_id, payload)
        self._delivery.snapshot_loaded(snapshot_id.offset)
        self._after_applied()

    def on_role(self, change: RoleChanged, log_end_offset: int) -> None:
        self._announce(self._delivery.role_changed(change.role, change.epoch, change.leader_id, log_end_offset))
        if change.role is Role.LEADER:
            self._after_applied()  # announced once applied up to its first entry

    def on_append_resolved(self, resolved: AppendResolved) -> None:
        future = self._appends.pop((resolved.epoch, resolved.last_offset), None)
        if future is None or future.done():
            return
        if resolved.error is ErrorCode.NONE:
            self._when_applied(resolved.last_offset + 1, resolved.last_offset, future)
        else:
            future.set_exception(
                KafkaError(
                    f"append [{resolved.base_offset}, {resolved.last_offset}] in epoch {resolved.epoch}: "
                    f"{resolved.error.name}" + (" (it may still commit)" if resolved.appended else ""),
                    resolved.error,
                    leader_id=resolved.leader_id,
                    epoch=resolved.epoch,
                    appended=resolved.appended,
                )
            )

    def on_read_resolved(self, resolved: ReadResolved) -> None:
        future = self._reads.pop(resolved.read_id, None)
        if future is None and self._issuing_read:
            self._resolved_early[resolved.read_id] = resolved
            return
        if future is None or future.done():
            return
        if resolved.error is ErrorCode.NONE:
            self._when_applied(resolved.read_index, resolved.read_index, future)
        else:
            future.set_exception(
                KafkaError(f"read barrier: {resolved.error.name}", resolved.error, leader_id=resolved.leader_id)
            )

    def on_fatal(self, error: BaseException) -> None:
        self._routes.close()
        self._fail_waiters(KafkaError(f"the Raft layer failed: {error}", ErrorCode.UNKNOWN_SERVER_ERROR))
        if self._on_fatal is not None:
            self._on_fatal()

    # ---- applying committed entries -------------------------------------------------------------

    def _replay_on_start(self) -> None:
        """Load the latest snapshot, then the log up to the high watermark this node had exposed."""
        log_ = self._log
        assert log_ is not None
        snapshot = log_.latest_snapshot()
        applied = log_.log_start_offset
        self._delivery.start(applied, applied)
        if snapshot is not None:
            payload = log_.snapshot_data(snapshot)
            for listener in self._listeners:
                listener.handle_load_snapshot(snapshot, payload)
            applied = snapshot.offset
        # entries below the checkpointed high watermark were committed, and a node never
        # truncates below what it exposed, so they are still here
        self._delivery.start(applied, min(log_.high_watermark, log_.end_offset))
        while self._delivery.behind:
            self._apply_slice(APPLY_SLICE_BYTES)

    def _apply(self) -> None:
        if self._applying:
            return
        self._applying = True
        try:
            self._apply_slice(APPLY_SLICE_BYTES)
        finally:
            self._applying = False
        if self._delivery.behind and not self._apply_scheduled:
            self._apply_scheduled = True
            asyncio.get_running_loop().call_soon(self._apply_later)
        self._after_applied()

    def _apply_later(self) -> None:
        self._apply_scheduled = False
        if self._log is not None and (self._shell is None or self._shell.failed is None):
            self._apply()

    def _apply_slice(self, budget: int) -> None:
        """Hand out up to about `budget` bytes of committed entries (the core cuts the batches)."""
        log_ = self._log
        assert log_ is not None
        delivery = self._delivery
        target = delivery.commit_target
        while delivery.applied < target and budget > 0:
            if delivery.applied < log_.log_start_offset:
                raise KafkaError(
                    f"entry {delivery.applied} to apply is gone from the log (starts at {log_.log_start_offset})",
                    ErrorCode.KAFKA_STORAGE_ERROR,
                )
            entries = log_.read(delivery.applied, min(budget, 1024 * 1024))
            batches, size_bytes, end = delivery.runs(entries, target)
            if end is None:
                break
            for batch in batches:
                delivery.delivered(batch)
                for listener in self._listeners:
                    listener.handle_commit(batch)
            budget -= size_bytes
            delivery.read_through(end)

    def _when_applied(self, offset: int, value: int, future: asyncio.Future[int]) -> None:
        """Resolve `future` with `value` once the listeners applied everything below `offset`."""
        if self._delivery.applied >= offset:
            future.set_result(value)
        else:
            self._seq += 1
            heapq.heappush(self._after_apply, (offset, self._seq, value, future))

    def _after_applied(self) -> None:
        while self._after_apply and self._after_apply[0][0] <= self._delivery.applied:
            _, _, value, future = heapq.heappop(self._after_apply)
            if not future.done():
                future.set_result(value)
        if self._shell is not None:
            core = self._shell.core
            self._announce(self._delivery.leader_ready(core.role, core.epoch))

    def _announce(self, change: LeaderChange | None) -> None:
        if change is None:
            return
        for listener in self._listeners:
            listener.handle_leader_change(change.leader_id, change.epoch)

    def _fail_waiters(self, error: KafkaError) -> None:
        for future in [*self._appends.values(), *self._reads.values(), *(f for *_, f in self._after_apply)]:
            if not future.done():
                future.set_exception(error)
        self._appends.clear()
        self._reads.clear()
        self._after_apply.clear()


def create_raft_component(node: Node) -> RaftComponent:
    """COMPONENT_FACTORIES entry: every node runs Raft (voters: controllers; observers: brokers)."""
    return RaftComponent.from_node(node)
