"""Crash recovery of the partition log, against real files.

1. Hypothesis damages a crashed log's files at random places past the
   recovery point (torn writes, zeroed or garbage blocks, flipped bytes, junk
   appended, broken index files) and checks that on reopen every batch before
   the first damaged byte is served exactly as written and nothing from the
   damaged batch on ever is.
2. A writer process is SIGKILLed mid-append, round after round, and the log
   is reopened (recovered) each time: it must open, hold only sound batches
   with contiguous offsets and the writer's bytes, and keep everything the
   writer had flushed.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.protocol.records.batch import decode_batches
from kraftpy.storage import PartitionLog
from tests.conftest import REPO_ROOT
from tests.unit.storage.test_storage_fixtures import make_batch, open_log, read_all

CONFIG = {"segment_bytes": 1500, "index_interval_bytes": 120}


@dataclass(frozen=True)
class Written:
    segment: int  # base offset of the segment file holding the batch
    position: int
    data: bytes  # the batch as it sits on disk (offset and epoch stamped)


def build_crashed_log(directory: Path, batch_sizes: list[tuple[int, int]], flush_after: int) -> list[Written]:
    """Append batches (records, value size), flush after `flush_after` of them, then 'crash' (copy the files)."""
    live = directory.with_name(directory.name + "-live")
    log = open_log(live, **CONFIG)
    for i, (records, value_size) in enumerate(batch_sizes):
        log.append_as_leader(make_batch(records, value_size=value_size, ts=1000 + i, tag=i), i // 4, now_ms=0)
        if i + 1 == flush_after:
            log.flush()
            log.write_checkpoints()
    shutil.copytree(live, directory)
    written = []
    for seg in log.segments:
        data = (directory / f"{seg.base_offset:020d}.log").read_bytes()
        pos = 0
        for batch in decode_batches(data):
            written.append(Written(seg.base_offset, pos, data[pos : pos + batch.size]))
            pos += batch.size
    log.close()
    shutil.rmtree(live)
    return written


damage_kinds = st.sampled_from(["truncate", "zeros", "garbage", "flip", "append_junk"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    batch_sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=2, max_size=25),
    data=st.data(),
)
def test_damage_past_the_recovery_point_loses_exactly_the_damaged_suffix(batch_sizes, data) -> None:
    flush_after = data.draw(st.integers(0, len(batch_sizes) - 1), label="flushed batches")
    kind = data.draw(damage_kinds, label="damage")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        written = build_crashed_log(directory, batch_sizes, flush_after)
        # Damage lands in batch `victim` or later (never below the recovery point).
        victim = data.draw(st.integers(flush_after, len(written) - 1), label="victim batch")
        target = written[victim]
        path = directory / f"{target.segment:020d}.log"
        before = path.read_bytes()
        at = target.position + data.draw(st.integers(0, len(target.data) - 1), label="offset in batch")
        length = data.draw(st.integers(1, 600), label="length")
        after = bytearray(before)
        if kind == "truncate":
            after = after[:at]
        elif kind == "zeros":
            after[at : at + length] = bytes(len(after[at : at + length]))
        elif kind == "garbage":
            rnd = random.Random(data.draw(st.integers(0, 2**32), label="garbage seed"))
            after[at : at + length] = rnd.randbytes(len(after[at : at + length]))
        elif kind == "flip":
            after[at] ^= data.draw(st.integers(1, 255), label="xor")
        else:
            path = directory / f"{written[-1].segment:020d}.log"
            before = path.read_bytes()
            after = bytearray(before) + data.draw(st.binary(min_size=1, max_size=200), label="junk")
        path.write_bytes(bytes(after))

        changed = [i for i in range(min(len(before), len(after))) if before[i] != after[i]]
        first_changed = changed[0] if changed else (len(after) if len(after) < len(before) else None)
        survivors = [
            w
            for w in written
            if first_changed is None
            or w.segment < target.segment
            or (w.segment == target.segment and w.position + len(w.data) <= first_changed)
            or (kind == "append_junk")
        ]
        with open_log(directory, **CONFIG) as log:
            served = read_all(log, max_bytes=data.draw(st.integers(1, 3000), label="max_bytes"))
            assert served == b"".join(w.data for w in survivors)
            expected_end = next(iter(decode_batches(survivors[-1].data))).last_offset + 1 if survivors else 0
            assert log.log_end_offset == expected_end
            for w in survivors:  # every survivor is also found by its own offsets
                base = next(iter(decode_batches(w.data))).base_offset
                assert log.read(base, 1) == w.data
            entries = log.leader_epoch_cache.entries
            assert all(e.start_offset < max(expected_end, 1) for e in entries)
            # The log is writable at the right place afterwards, and a second open agrees.
            log.append_as_leader(make_batch(2, tag=999), 50, now_ms=0)
            after_append = read_all(log)
        with open_log(directory, **CONFIG) as log:
            assert read_all(log) == after_append
            assert log.last_recovery.first_bad is None


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_broken_index_files_never_change_what_is_served(data) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "t-0"
        with open_log(directory, **CONFIG) as log:
            for i in range(30):
                log.append_as_leader(make_batch(2, value_size=60, ts=1000 + i, tag=i), 0, now_ms=0)
            expected = read_all(log)
        index_files = sorted(p for p in directory.iterdir() if p.suffix in (".index", ".timeindex"))
        victim = data.draw(st.sampled_from(index_files), label="index file")
        content = bytearray(victim.read_bytes())
        if content and data.draw(st.booleans(), label="overwrite"):
            at = data.draw(st.integers(0, len(content) - 1))
            content[at] ^= data.draw(st.integers(1, 255))
        else:
            content += data.draw(st.binary(min_size=1, max_size=30), label="junk")
        victim.write_bytes(bytes(content))
        with open_log(directory, **CONFIG) as log:
            assert read_all(log, max_bytes=data.draw(st.integers(1, 2000))) == expected
            for offset in range(0, 60, 5):
                assert next(iter(decode_batches(log.read(offset, 1)))).base_offset == offset - offset % 2
            # Batch i holds timestamps 1000+i, 1001+i at offsets 2i, 2i+1.
            found = log.offset_for_timestamp(1017)
            assert found is not None and (found.offset, found.timestamp) == (33, 1017)


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from kraftpy.storage import LogConfig, PartitionLog
    from kraftpy.protocol.records.batch import build_batch

    directory, epoch = Path(sys.argv[1]), int(sys.argv[2])
    log = PartitionLog.open(directory, LogConfig(segment_bytes=3 * 1024 * 1024, index_interval_bytes=4096))
    print("opened", log.log_end_offset, flush=True)
    i = 0
    while True:
        offset = log.log_end_offset
        # Deterministic content: a batch's value says which offset it was written at.
        value = f"{offset}:".encode().ljust(200_000, b"v")
        log.append_as_leader(build_batch([(b"k", value, (), 1000)]), epoch, now_ms=0)
        i += 1
        if i % 5 == 0:
            log.flush()
            print("flushed", log.recovery_point, flush=True)
        print("appended", offset, flush=True)
    """
)


def test_sigkill_mid_append_then_reopen_in_a_loop(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    rnd = random.Random(2024)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    flushed = 0
    for round_ in range(10):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(directory), str(round_)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert child.stdout is not None
        kill_after = rnd.randint(1, 25)
        appended = 0
        for line in child.stdout:
            kind, value = line.split()
            if kind == "flushed":
                flushed = max(flushed, int(value))
            elif kind == "appended":
                appended += 1
                if appended >= kill_after:
                    break
        # The writer is mid-way through its next append (or flush) when this lands.
        child.send_signal(signal.SIGKILL)
        child.wait()
        assert child.returncode == -signal.SIGKILL, child.stderr.read() if child.stderr else ""
        with PartitionLog.open(directory) as log:
            assert log.log_end_offset >= flushed  # everything the writer flushed survived
            batches = list(decode_batches(read_all(log)))  # every CRC checked
            assert [b.base_offset for b in batches] == list(range(log.log_end_offset))
            for b in batches:
                assert b.records[0].value.startswith(f"{b.base_offset}:".encode())
            epochs = [b.header.partition_leader_epoch for b in batches]
            assert epochs == sorted(epochs)
            assert log.leader_epoch_cache.latest_epoch == (epochs[-1] if epochs else -1)


def test_a_read_whose_byte_limit_lands_past_a_damaged_index_entry_walks_around_it(tmp_path: Path) -> None:
    # Found by the property above: a read that stops at max_bytes looked up where to stop in the index
    # and walked from a damaged entry (pointing inside a batch) instead of from a known batch start.
    directory = tmp_path / "t-0"
    with open_log(directory, **CONFIG) as log:
        for i in range(30):
            log.append_as_leader(make_batch(2, value_size=60, ts=1000 + i, tag=i), 0, now_ms=0)
        expected = read_all(log)
    index = directory / "00000000000000000000.index"
    content = bytearray(index.read_bytes())
    content[7] ^= 1  # the first entry's position, one byte off a batch start
    index.write_bytes(bytes(content))
    with open_log(directory, **CONFIG) as log:
        assert read_all(log, max_bytes=200) == expected
