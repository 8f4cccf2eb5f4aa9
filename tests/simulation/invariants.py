"""The safety properties the simulator checks after every step, with their precise definitions.

* One leader per epoch: at most one node ever becomes leader of a given epoch
  (across restarts too).
* Epochs never go back: within one life a node's epoch only grows, the durable
  quorum-state epoch only grows, and after a restart the node's epoch is at least
  every epoch it had put in a message it sent before the crash.
* Log matching: two logs that hold an entry with the same (offset, epoch) hold the
  same entry and the same prefix. Checked incrementally: every appended entry's
  (offset, epoch) must map to one (data, epoch of the entry before it) cluster-wide;
  by induction on the offset this gives identical prefixes.
* Committed entries are identical everywhere: an entry is committed once any node
  applies it (its exposed high watermark passed it); every node applies exactly
  the same entry at each offset.
* Leader completeness (Raft's: an entry committed in epoch T is in the log of every
  leader of an epoch above T): a node that becomes leader of epoch E holds every entry
  known to be committed in an epoch below E, at or above its log start (entries below
  are covered by its snapshot, checked too). "Committed in an epoch below E" is
  established soundly: a node that applies an entry while in epoch F proves it was
  committed in some epoch <= F (we keep the smallest such F per entry), and a write
  acknowledged by the leader of epoch F was committed in F. A leader of an older
  epoch may still be elected after a newer epoch committed something (a delayed vote
  answer does it); it can commit nothing, and it need not hold those entries.
* High watermark: a node's exposed high watermark (the `CommitAdvanced` values the
  shell performed) only grows within a life, and after a restart every value it
  exposes is at least the largest it had exposed in any earlier life. (Right after
  a restart the node has not learned the high watermark yet; it exposes nothing
  until it has, and its state machine holds just its snapshot.)
* Snapshots agree with the log: a snapshot (end_offset, epoch) holds the state of
  the committed log below end_offset, whose last entry has that epoch; one id,
  one content, cluster-wide.
* Acknowledged writes: a proposal resolved as committed is the committed entry at
  its offset, with its epoch; a linearizable read's index is at least every offset
  acknowledged as committed before the read was asked for.
"""

from __future__ import annotations

import hashlib

from kraftpy.raft.log import Entry, OffsetAndEpoch


class InvariantViolation(AssertionError):
    """A safety property failed; the message carries the seed and how to replay it."""


def chain_digest(previous: bytes, entry_epoch: int, data: bytes) -> bytes:
    return hashlib.blake2b(previous + entry_epoch.to_bytes(8, "big") + data, digest_size=12).digest()


GENESIS = b"\x00" * 12


class Invariants:
    def __init__(self) -> None:
        self.leaders: dict[int, int] = {}  # epoch -> node
        self.entry_ids: dict[tuple[int, int], tuple[bytes, int]] = {}  # (offset, epoch) -> (data, prev epoch)
        self.committed: list[tuple[int, bytes]] = []  # offset -> (epoch, data)
        self.committed_by: list[int] = []  # offset -> smallest epoch it is known committed in (or before)
        self.digests: list[bytes] = [GENESIS]  # digests[o] = state after applying offsets < o
        self.snapshots: dict[OffsetAndEpoch, bytes] = {}
        self.max_exposed_hw: dict[int, int] = {}
        self.max_sent_epoch: dict[int, int] = {}
        self.durable_epoch: dict[int, int] = {}
        self.acked_high: int = 0  # one past the largest offset acknowledged as committed anywhere
        self.acked_entries: dict[int, tuple[int, bytes]] = {}  # offset -> (epoch, data), acked writes

    # ---- elections ---------------------------------------------------------------------

    def on_leader(self, node: int, epoch: int) -> None:
        other = self.leaders.get(epoch)
        if other is not None:
            raise InvariantViolation(f"two leaderships in epoch {epoch}: node {other} and node {node}")
        self.leaders[epoch] = node

    def on_epoch_sent(self, node: int, epoch: int) -> None:
        if epoch > self.max_sent_epoch.get(node, 0):
            self.max_sent_epoch[node] = epoch

    def on_persist(self, node: int, epoch: int) -> None:
        if epoch < self.durable_epoch.get(node, 0):
            raise InvariantViolation(f"node {node}: durable epoch went back to {epoch}")
        self.durable_epoch[node] = epoch

    def on_restart(self, node: int, epoch: int) -> None:
        sent = self.max_sent_epoch.get(node, 0)
        if epoch < sent:
            raise InvariantViolation(
                f"node {node} restarted in epoch {epoch} but had sent messages in epoch {sent}: "
                "an epoch left the node before it was persisted"
            )

    # ---- logs -----------------------------------------------------------------------------

    def on_append(self, node: int, entries: tuple[Entry, ...], prev_epoch: int) -> None:
        for entry in entries:
            key = (entry.offset, entry.epoch)
            seen = self.entry_ids.get(key)
            if seen is None:
                self.entry_ids[key] = (entry.data, prev_epoch)
            elif seen != (entry.data, prev_epoch):
                raise InvariantViolation(
                    f"log matching: node {node} has entry (offset {entry.offset}, epoch {entry.epoch}) "
                    f"with data {entry.data!r} after epoch {prev_epoch}; elsewhere it is {seen[0]!r} after epoch "
                    f"{seen[1]}"
                )
            prev_epoch = entry.epoch

    def on_apply(self, node: int, entry: Entry, node_epoch: int | None = None) -> None:
        o = entry.offset
        epoch = entry.epoch if node_epoch is None else node_epoch
        if o < len(self.committed):
            if self.committed[o] != (entry.epoch, entry.data):
                raise InvariantViolation(
                    f"node {node} applied offset {o} = (epoch {entry.epoch}, {entry.data!r}); "
                    f"committed there is (epoch {self.committed[o][0]}, {self.committed[o][1]!r})"
                )
            self.committed_by[o] = min(self.committed_by[o], epoch)
        elif o == len(self.committed):
            self.committed.append((entry.epoch, entry.data))
            self.committed_by.append(epoch)
            self.digests.append(chain_digest(self.digests[-1], entry.epoch, entry.data))
        else:
            raise InvariantViolation(f"node {node} applied offset {o} before offset {len(self.committed)}")

    def on_exposed_hw(self, node: int, hw: int) -> None:
        best = self.max_exposed_hw.get(node, 0)
        if hw < best:
            raise InvariantViolation(f"node {node}: high watermark went back from {best} to {hw}")
        self.max_exposed_hw[node] = hw

    def check_leader_log(self, node: int, epoch: int, log_start: int, read_entry) -> None:
        """Leader completeness; `read_entry(offset)` returns the node's entry or None."""
        for o in range(log_start, len(self.committed)):
            if self.committed_by[o] >= epoch:
                continue  # maybe committed only in this epoch or later: not required of this leader
            entry = read_entry(o)
            if entry is None or (entry.epoch, entry.data) != self.committed[o]:
                raise InvariantViolation(
                    f"node {node} became leader of epoch {epoch} without committed offset {o} "
                    f"(committed: {self.committed[o]}, its log: {entry})"
                )
        # writes acknowledged as committed but not applied anywhere yet are committed too
        for o, expected in self.acked_entries.items():
            if o >= max(log_start, len(self.committed)) and expected[0] < epoch:
                entry = read_entry(o)
                if entry is None or (entry.epoch, entry.data) != expected:
                    raise InvariantViolation(
                        f"node {node} became leader of epoch {epoch} without the acknowledged write at "
                        f"offset {o} ({expected}; its log: {entry})"
                    )

    # ---- snapshots ------------------------------------------------------------------------

    def on_snapshot(self, node: int, snapshot_id: OffsetAndEpoch, digest: bytes) -> None:
        end = snapshot_id.offset
        if end > len(self.committed):
            raise InvariantViolation(f"node {node}: snapshot {snapshot_id} beyond the committed log")
        if end > 0 and self.committed[end - 1][0] != snapshot_id.epoch:
            raise InvariantViolation(
                f"node {node}: snapshot {snapshot_id} but committed offset {end - 1} has epoch "
                f"{self.committed[end - 1][0]}"
            )
        if self.digests[end] != digest:
            raise InvariantViolation(f"node {node}: snapshot {snapshot_id} does not match the committed log")

    def on_snapshot_bytes(self, node: int, snapshot_id: OffsetAndEpoch, data: bytes) -> None:
        seen = self.snapshots.setdefault(snapshot_id, data)
        if seen != data:
            raise InvariantViolation(f"node {node}: two different snapshots with id {snapshot_id}")

    # ---- clients --------------------------------------------------------------------------

    def on_acked(self, node: int, epoch: int, offset: int, data: bytes) -> None:
        if offset < len(self.committed) and self.committed[offset] != (epoch, data):
            raise InvariantViolation(
                f"node {node} acknowledged {data!r} at offset {offset} epoch {epoch}, "
                f"but committed there is {self.committed[offset]}"
            )
        self.acked_high = max(self.acked_high, offset + 1)
        if offset >= len(self.committed):
            self.acked_entries[offset] = (epoch, data)
        for o in [o for o in self.acked_entries if o < len(self.committed)]:
            del self.acked_entries[o]  # applied somewhere by now: checked against `committed`

    def check_acked_in_log(self, acked: list[tuple[int, int, bytes]]) -> None:
        for epoch, offset, data in acked:
            if offset >= len(self.committed) or self.committed[offset] != (epoch, data):
                got = self.committed[offset] if offset < len(self.committed) else "nothing"
                raise InvariantViolation(
                    f"acknowledged write {data!r} (offset {offset}, epoch {epoch}) lost: committed log has {got}"
                )

    def on_read(self, node: int, read_index: int, required: int) -> None:
        if read_index < required:
            raise InvariantViolation(
                f"node {node}: linearizable read at index {read_index}, but {required} entries "
                "were acknowledged as committed before the read began (stale read)"
            )
