"""The asyncio shell around the sans-I/O core: clock, timers, storage actions, flush thread.

Design notes: docs/raft.md, section "raft/shell/driver.py".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import random
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from kraftpy.protocol.errors import ErrorCode, KafkaError, resource_error
from kraftpy.protocol.shell.clock import monotonic_ms
from kraftpy.raft.actions import (
    Action,
    AppendEntries,
    AppendResolved,
    CommitAdvanced,
    Flush,
    InstallSnapshot,
    PersistQuorumState,
    ReadResolved,
    RoleChanged,
    Send,
    TrimLog,
    TruncateTo,
    WriteSnapshotChunk,
)
from kraftpy.raft.config import RaftConfig
from kraftpy.raft.log import OffsetAndEpoch
from kraftpy.raft.messages import Message
from kraftpy.raft.node import NEVER, RaftNode
from kraftpy.raft.quorum_state import QuorumState, Role
from kraftpy.raft.shell import quorum_state_file
from kraftpy.raft.shell.durable_log import DurableLog

log = logging.getLogger(__name__)

MAX_TIMER_S = 1.0  # a tick at least this often even when the core needs none (cheap, bounds any drift)
STALL_BACKOFF_MS = (100, 5_000)  # first retry, cap (doubling)


class ShellListener(Protocol):
    """What the component learns from the shell, after each step."""

    def on_commit(self, high_watermark: int) -> None: ...

    def on_install(self, snapshot_id: OffsetAndEpoch) -> None: ...

    def on_role(self, change: RoleChanged, log_end_offset: int) -> None: ...

    def on_append_resolved(self, resolved: AppendResolved) -> None: ...

    def on_read_resolved(self, resolved: ReadResolved) -> None: ...

    def on_fatal(self, error: BaseException) -> None: ...


class RaftShell:
    def __init__(
        self,
        *,
        node_id: int,
        voters: frozenset[int],
        cluster_id: str,
        log_dir: Path,
        durable_log: DurableLog,
        quorum_state: QuorumState,
        config: RaftConfig,
        send: Callable[[Message], None],
        listener: ShellListener,
        rng: random.Random | None = None,
        clock: Callable[[], int] = monotonic_ms,
        follower_flush_in_loop: bool = False,
    ) -> None:
        """`follower_flush_in_loop`: a follower fsyncs in the event loop itself, not in the flush
        thread (see `_perform`); for a node whose loop serves nothing but the quorum."""
        self.node_id = node_id
        self._follower_flush_in_loop = follower_flush_in_loop
        self.cluster_id = cluster_id
        self.log_dir = Path(log_dir)
        self.log = durable_log
        self.config = config
        self._send = send
        self._listener = listener
        self._clock = clock
        self._notifications: deque[tuple[str, Any]] = deque()
        self._dispatching = False
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._ticked_at = -1
        self._deferred_flushes: deque[int] = deque()
        self._flushed_in_step: deque[tuple[Callable[[Any], object], Any]] = deque()
        self._flush_pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="raft-flush")
        self._loop = asyncio.get_running_loop()
        self.failed: BaseException | None = None
        self.stopped = False
        self.flushes = 0
        self._stalled: deque[Action] | None = None  # actions still to perform after a resource error
        self._stall_error: str | None = None
        self._stall_delay_ms = STALL_BACKOFF_MS[0]
        self._stalled_flushes: deque[int] = deque()
        self._drain_scheduled = False
        self.stalls = 0
        self.core = RaftNode(
            node_id=node_id,
            voters=voters,
            cluster_id=cluster_id,
            log=durable_log,
            quorum_state=quorum_state,
            rng=rng or random.Random(),
            now_ms=clock(),
            config=config,
        )
        self._after_input()

    # ---- inputs -------------------------------------------------------------------------------

    def _check_running(self) -> None:
        if self.failed is not None or self.stopped:
            raise KafkaError(
                f"node {self.node_id}: the Raft layer is {'failed' if self.failed else 'stopped'}",
                ErrorCode.BROKER_NOT_AVAILABLE,
            )
        if self._stalled is not None:
            raise KafkaError(
                f"node {self.node_id}: Raft storage is stalled ({self._stall_error}); retrying",
                ErrorCode.KAFKA_STORAGE_ERROR,
            )

    def handle(self, message: Message) -> None:
        if self.failed is not None or self.stopped or self._stalled is not None:
            return
        self._step(self.core.handle, message, self._clock())

    def append(self, records: list[bytes]) -> tuple[int, int, int]:
        """Propose `records`. They are appended at the end of this event-loop turn, together with
        every other proposal made in it: one batch, one write and one answer per parked fetch
        for all of them, and no wait for a caller that proposes alone."""
        self._check_running()
        result = self._step(self._append_held, records, self._clock())
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._loop.call_soon(self._drain_proposals)
        return result

    def _append_held(self, records: list[bytes], now_ms: int) -> tuple[int, int, int]:
        return self.core.append(records, now_ms, drain=False)

    def _drain_proposals(self) -> None:
        self._drain_scheduled = False
        if self.failed is None and not self.stopped and self._stalled is None:
            self._step(self.core.drain_proposals, self._clock())

    def read_index(self) -> int:
        self._check_running()
        return self._step(self.core.read_index, self._clock())

    def resign(self) -> None:
        self._check_running()
        self._step(self.core.resign, self._clock())

    def snapshot_created(self, snapshot_id: OffsetAndEpoch) -> None:
        self._check_running()
        self._step(self.core.on_snapshot_created, snapshot_id, self._clock())

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        if self.failed is None and not self.stopped and self._stalled is None:
            self._ticked_at = self._clock()
            self._step(self.core.tick, self._ticked_at)

    def _on_flushed(self, up_to_offset: int) -> None:
        if self._stalled is not None:
            self._stalled_flushes.append(up_to_offset)  # the core learns it once the stall is over
            return
        if self.failed is None and not self.stopped:
            self.flushes += 1
            self._step(self.core.on_flushed, up_to_offset, self._clock())

    def _step(self, func: Callable[..., Any], *args: Any) -> Any:
        """One input: the core call, then every action, then the listener, then the timer."""
        try:
            result = func(*args)
        except KafkaError:
            self._after_input()  # a refused proposal or read (not leader, backlog full): nothing changed
            raise
        except Exception as exc:
            self._fail(exc)
            raise KafkaError(f"node {self.node_id}: Raft failed: {exc}", ErrorCode.UNKNOWN_SERVER_ERROR) from exc
        self._after_input()
        return result

    def _after_input(self) -> None:
        performed = self._perform_all(deque(self.core.take_actions()))
        self._report_flushed_in_step()
        if not performed:
            return
        self._dispatch()
        self._arm_timer()

    def _report_flushed_in_step(self) -> None:
        """The outcome of fsyncs this step did in the loop, each the next input, before the
        listener hears of the step: a follower's next fetch (its acknowledgement) then leaves
        before it applies commits or goes back to the loop (docs/perf-raft.md)."""
        while self._flushed_in_step:
            report, arg = self._flushed_in_step.popleft()
            with contextlib.suppress(KafkaError):  # a failure is recorded (self.failed) and logged by _step
                report(arg)

    def _perform_all(self, actions: deque[Action]) -> bool:
        """Perform `actions` in order; False if they stalled on a resource error or failed."""
        while actions:
            try:
                self._perform(actions[0])
            except Exception as exc:
                shortage = resource_error(exc)
                if shortage is None and self._stalled is None:
                    self._fail(exc)
                    return False
                self._stall(actions, exc)
                return False
            actions.popleft()
        return True

    # ---- resource stalls ----------------------------------------------------------------------

    def _stall(self, actions: deque[Action], exc: BaseException) -> None:
        first = self._stalled is None
        self._stalled = actions
        self._stall_error = f"{type(exc).__name__}: {exc}"
        if first:
            self.stalls += 1
            self._stall_delay_ms = STALL_BACKOFF_MS[0]
            if self._timer is not None:
                self._timer.cancel()
                self._timer = self._timer_at = None
            log.error(
                "node %d: Raft storage stalled on %s; retrying %s (peer messages are dropped meanwhile)",
                self.node_id,
                self._stall_error,
                type(actions[0]).__name__,
            )
        else:
            self._stall_delay_ms = min(self._stall_delay_ms * 2, STALL_BACKOFF_MS[1])
        self._loop.call_later(self._stall_delay_ms / 1000, self._retry_stalled)

    def _retry_stalled(self) -> None:
        actions = self._stalled
        if actions is None or self.failed is not None or self.stopped:
            return
        if not self._perform_all(actions):
            self._report_flushed_in_step()  # kept for after the stall, or dropped if failed
            return  # stalled again (rescheduled) or failed
        log.warning("node %d: Raft storage recovered after %s", self.node_id, self._stall_error)
        self._stalled = None
        self._stall_error = None
        self._report_flushed_in_step()
        self._dispatch()
        while self._stalled_flushes and self._stalled is None and self.failed is None:
            self._on_flushed(self._stalled_flushes.popleft())
        if self._stalled is None and self.failed is None:
            self._drain_proposals()  # proposals made before the stall was noticed
        self._arm_timer()

    def stall_status(self) -> dict[str, Any]:
        """For the node's status: whether storage is stalled now, on what, and how often it was."""
        return {"stalled": self._stalled is not None, "error": self._stall_error, "stalls": self.stalls}

    # ---- actions ------------------------------------------------------------------------------

    def _perform(self, action: Action) -> None:
        if isinstance(action, Send):
            self._send(action.message)
        elif isinstance(action, AppendEntries | TruncateTo | TrimLog | WriteSnapshotChunk):
            self.log.apply(action)
        elif isinstance(action, Flush):
            if self.core.role is Role.LEADER:
                # The leader's own fsync runs alongside the followers' round trip, so it can wait
                # until the step's answers (parked fetches carrying the new entries) are written:
                # started now, the flush thread would take the GIL from them. A follower's fsync
                # is its next fetch's critical path: it starts at once.
                self._deferred_flushes.append(action.up_to_offset)
                if len(self._deferred_flushes) == 1:
                    self._loop.call_soon(self._submit_deferred_flushes)
            else:
                self._submit_deferred_flushes()  # any deferred ones first (the core takes reports in any order)
                if self._follower_flush_in_loop:
                    # The follower's next fetch waits for this fsync anyway, and handing it to the
                    # thread and back costs two wake-ups on the commit's path (docs/perf-raft.md).
                    # Done here, as KRaft's Raft thread does it, it blocks the loop for the fsync:
                    # only on a node whose loop serves nothing else (a dedicated controller;
                    # RaftComponent decides).
                    self._flush(action.up_to_offset, self._report_in_step)
                else:
                    self._flush_pool.submit(self._flush, action.up_to_offset, self._loop.call_soon_threadsafe)
        elif isinstance(action, PersistQuorumState):
            quorum_state_file.write(self.log_dir, action.state, self.cluster_id)
        elif isinstance(action, InstallSnapshot):
            self.log.apply(action)
            self._notifications.append(("install", action.snapshot_id))
        elif isinstance(action, CommitAdvanced):
            self.log.set_high_watermark(action.high_watermark)
            self._notifications.append(("commit", action.high_watermark))
        elif isinstance(action, AppendResolved):
            self._notifications.append(("append", action))
        elif isinstance(action, ReadResolved):
            self._notifications.append(("read", action))
        elif isinstance(action, RoleChanged):
            # the log end now is where a new leader's epoch starts (its first entry comes next)
            self._notifications.append(("role", (action, self.log.end_offset)))
        else:  # pragma: no cover - a new action type the shell does not know yet
            raise TypeError(f"unknown Raft action {action!r}")

    def _submit_deferred_flushes(self) -> None:
        if self.stopped or self.failed is not None:
            self._deferred_flushes.clear()  # closing the log flushes everything anyway
            return
        while self._deferred_flushes:
            self._flush_pool.submit(self._flush, self._deferred_flushes.popleft(), self._loop.call_soon_threadsafe)

    def _report_in_step(self, report: Callable[[Any], object], arg: Any) -> None:
        self._flushed_in_step.append((report, arg))

    def _flush(self, up_to_offset: int, report: Callable[..., object]) -> None:
        """fsync, then report back to the loop with `report` (call_soon_threadsafe from the flush
        thread: one thread, so in order; in the loop, `_report_in_step`: after the step's other
        actions). A failed fsync is fatal either way: the kernel may have dropped the pages it
        failed to write."""
        try:
            self.log.flush(up_to_offset)
        except BaseException as exc:
            report(self._fail, exc)
            return
        report(self._on_flushed, up_to_offset)

    def _dispatch(self) -> None:
        if self._dispatching:
            return  # the outer dispatch loop will hand these out, in order
        self._dispatching = True
        listener = self._listener
        try:
            while self._notifications and self.failed is None:
                kind, value = self._notifications.popleft()
                try:
                    if kind == "commit":
                        listener.on_commit(value)
                    elif kind == "install":
                        listener.on_install(value)
                    elif kind == "append":
                        listener.on_append_resolved(value)
                    elif kind == "read":
                        listener.on_read_resolved(value)
                    else:
                        listener.on_role(*value)
                except Exception as exc:
                    # a state machine that failed to apply a commit no longer matches the log:
                    # carrying on would serve a diverged state, so the node stops (KRaft does too)
                    log.error("the Raft listener failed on %s %s", kind, value)
                    self._fail(exc)
        finally:
            self._dispatching = False

    def _arm_timer(self) -> None:
        if self.failed is not None or self.stopped:
            return
        now = self._clock()
        deadline = self.core.next_deadline_ms()
        if deadline >= NEVER:
            deadline = now + int(MAX_TIMER_S * 1000)
        deadline = min(deadline, now + int(MAX_TIMER_S * 1000))
        if self._timer is not None:
            if self._timer_at is not None and self._timer_at <= deadline:
                return  # fires no later than needed; an early tick is harmless
            self._timer.cancel()
        # a deadline still due right after a tick would spin the loop: wait a millisecond then
        delay_ms = max(deadline - now, 1 if self._ticked_at == now else 0)
        self._timer_at = now + delay_ms
        self._timer = self._loop.call_later(delay_ms / 1000, self._on_timer)

    # ---- faults and shutdown ------------------------------------------------------------------

    def _fail(self, error: BaseException) -> None:
        if self.failed is not None:
            return
        self.failed = error
        log.critical("node %d: Raft stops after a fatal error: %r", self.node_id, error, exc_info=error)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self._listener.on_fatal(error)
        except Exception:
            log.exception("on_fatal failed")

    async def close(self) -> None:
        """Stop taking inputs, wait for the flush in flight, leave the log to the caller to close."""
        self.stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await asyncio.get_running_loop().run_in_executor(None, self._flush_pool.shutdown, True)

    @property
    def now_ms(self) -> int:
        return self._clock()
