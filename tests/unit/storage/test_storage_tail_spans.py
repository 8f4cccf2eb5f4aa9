"""The active segment's in-memory tail of batch spans: what it answers is what walking the file answers.

A follower's or tailing consumer's fetch finds its batch from the spans a segment keeps past its last
offset-index entry (storage/segment.py), not by reading headers from disk. These tests hold the tail to
the file after appends, rolls, truncations, follower appends and a reopen, and check that a read at the
tail really is served from memory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraftpy.storage import segment as segment_module
from kraftpy.storage.log import PartitionLog
from kraftpy.storage.scan import walk_headers
from tests.unit.storage.test_storage_fixtures import make_batch, open_log

T = TypeVar("T")
SMALL = {"segment_bytes": 4096, "index_interval_bytes": 300}


def walked(log: PartitionLog, fn: Callable[[], T]) -> T:
    """`fn()` with every segment's tail forgotten: the answer of walking headers on disk."""
    saved = [(seg, seg._tail) for seg in log._segments]
    for seg, _ in saved:
        seg._tail = None
    try:
        return fn()
    finally:
        for seg, tail in saved:
            seg._tail = tail


def check_tails(log: PartitionLog) -> None:
    """Each kept tail is exactly the batches on disk from the last index entry (or 0) to the end."""
    for seg in log._segments:
        if seg._tail is None:
            continue
        last = seg.offset_index.last_entry
        start = 0 if last is None else last.position
        assert seg._tail == list(walk_headers(seg.fd, start, seg.size)), seg


def check_reads(log: PartitionLog) -> None:
    start, end = log.log_start_offset, log.log_end_offset
    for offset in range(start, end):
        for max_bytes in (1, 150, 700, 1 << 20):
            for max_offset in (None, offset + 1, (offset + end) // 2 + 1, end):

                def read(o=offset, m=max_bytes, mo=max_offset) -> bytes:
                    return log.read(o, m, max_offset=mo, min_one_batch=m == 1)

                assert read() == walked(log, read), (offset, max_bytes, max_offset)
    for ts in (0, 1_000, 1_005, 10_000):

        def by_time(t=ts) -> object:
            return log.offset_for_timestamp(t)

        assert by_time() == walked(log, by_time)


operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.integers(1, 160)),
        st.tuples(st.just("truncate"), st.floats(0, 1), st.just(0)),
        st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_reads_from_the_tail_are_those_from_disk(tmp_path_factory: pytest.TempPathFactory, ops) -> None:
    directory = tmp_path_factory.mktemp("tail") / "t-0"
    log = open_log(directory, **SMALL)
    try:
        for i, (op, a, b) in enumerate(ops):
            if op == "append":
                log.append_as_leader(make_batch(a, value_size=b, ts=1_000 + i), i // 5, now_ms=0)
            elif op == "truncate":
                log.truncate_to(log.log_start_offset + int(a * (log.log_end_offset - log.log_start_offset)))
            else:
                log.close()
                log = open_log(directory, **SMALL)
            check_tails(log)
        check_reads(log)
    finally:
        log.close()


def test_follower_appends_keep_the_tail(tmp_path: Path) -> None:
    with open_log(tmp_path / "leader", **SMALL) as leader, open_log(tmp_path / "follower", **SMALL) as follower:
        for i in range(40):
            leader.append_as_leader(make_batch(1 + i % 3, value_size=40 + i), 2 + i // 10, now_ms=0)
            follower.append_as_follower(leader.read(follower.log_end_offset, 1 << 20), now_ms=0)
            check_tails(follower)
        assert follower._segments[-1]._tail  # the active segment keeps one
        check_reads(follower)


def test_a_tail_read_walks_no_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with open_log(tmp_path / "t-0") as log:
        for _ in range(200):  # 200 batches of about 130 bytes: several index entries, then a tail
            log.append_as_leader(make_batch(1, value_size=60), 0, now_ms=0)
        walks = []
        real = segment_module.walk_headers
        monkeypatch.setattr(segment_module, "walk_headers", lambda *a, **k: walks.append(a) or real(*a, **k))
        end = log.log_end_offset
        indexed = log._segments[-1].offset_index.last_entry
        assert indexed is not None and end - indexed.offset > 5
        for offset in range(indexed.offset, end):  # a follower at the end, and consumers a little behind
            assert log.read(offset, 1 << 20, max_offset=end, min_one_batch=True)
        assert walks == []
        log.read(0, 1 << 20)  # the segment's start lies before the last index entry: walked on disk
        assert walks
