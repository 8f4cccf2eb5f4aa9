"""The power-loss fault's torn append on the Raft log (tools/faults/disk.py `tear_raft_tail`), on the
preallocated segment a killed node leaves: the torn copy lands right after the last whole batch, where
a torn append would be, and the node's recovery cuts it there."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

from kraftpy.raft.log import Entry
from kraftpy.raft.shell.durable_log import METADATA_LOG_DIR, RAFT_LOG_CONFIG, DurableLog
from kraftpy.tools.faults.disk import tear_raft_tail


def test_a_torn_append_lands_after_the_last_batch_and_recovery_cuts_it(tmp_path: Path) -> None:
    live = DurableLog.open(tmp_path / "live" / METADATA_LOG_DIR)
    live.append([Entry(i, 1, f"entry-{i}".encode()) for i in range(5)])
    live.flush(5)
    data_end = live._plog.segments[-1].size_bytes
    killed = tmp_path / "killed"
    shutil.copytree(tmp_path / "live", killed)  # what a SIGKILL leaves: the file still preallocated
    live.close()
    (segment,) = (killed / METADATA_LOG_DIR).glob("*.log")
    assert segment.stat().st_size == RAFT_LOG_CONFIG.segment_bytes

    cut = tear_raft_tail(killed, random.Random(7))
    assert cut is not None and cut.at == data_end and cut.torn_bytes > 0
    assert segment.read_bytes()[data_end : data_end + cut.torn_bytes].count(0) < cut.torn_bytes

    recovered = DurableLog.open(killed / METADATA_LOG_DIR)
    try:
        outcome = recovered._plog.last_recovery
        assert outcome is not None and outcome.first_bad is not None
        assert outcome.first_bad[1] == data_end, "the torn batch was found where it was written"
        assert recovered.end_offset == 5
        assert [e.data for e in recovered.read(0, 1 << 20)] == [f"entry-{i}".encode() for i in range(5)]
    finally:
        recovered.close()
