"""`kraftpy log verify DIR`: a whole node data directory checked; exit 1 naming the bad file and byte."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
from click.testing import CliRunner

from kraftpy.protocol.records.batch import decode_batches
from kraftpy.tools.cli import main
from tests.unit.storage.test_storage_fixtures import make_batch, open_log


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A node's data dir: two partitions and the metadata log, several segments each, cleanly closed."""
    root = tmp_path / "node-1"
    for name in ("partitions/orders-0", "partitions/orders-1", "__cluster_metadata-0"):
        with open_log(root / name, segment_bytes=1500, index_interval_bytes=100) as log:
            for i in range(30):
                log.append_as_leader(make_batch(2, tag=i), i // 10, now_ms=0)
    (root / "partitions" / "orders-2.0123abcd-delete").mkdir()  # a deleted partition: not checked
    return root


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["log", "verify", *args])
    return result.exit_code, result.stdout, result.stderr


def batch_at(path: Path, index: int) -> tuple[int, int]:
    """(position, size) of the index-th batch of a .log file."""
    pos = 0
    for i, batch in enumerate(decode_batches(path.read_bytes())):
        if i == index:
            return pos, batch.header.size
        pos += batch.header.size
    raise AssertionError("not that many batches")


def flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_sound_data_dir_exits_0_with_a_summary(data_dir: Path) -> None:
    code, out, err = run(str(data_dir))
    assert code == 0, err
    assert out.startswith("3 partition(s), ") and "90 batch(es)" in out and out.rstrip().endswith("all sound")
    code, out, _ = run(str(data_dir), "--json")
    summary = json.loads(out)
    assert code == 0 and summary["partitions"] == 3 and summary["batches"] == 90 and summary["problems"] == []
    assert summary["index_entries"] > 0 and summary["segments"] > 3


def test_one_partition_directory_can_be_given(data_dir: Path) -> None:
    code, out, _ = run(str(data_dir / "partitions" / "orders-1"))
    assert code == 0 and out.startswith("1 partition(s)")


@pytest.mark.parametrize("field_at", [-1, 17, 5, 14], ids=["payload", "crc", "base_offset", "leader_epoch"])
def test_a_flipped_byte_exits_1_naming_the_file_and_the_batch_position(data_dir: Path, field_at: int) -> None:
    segment = sorted((data_dir / "partitions" / "orders-1").glob("*.log"))[1]
    pos, size = batch_at(segment, 2)
    flip(segment, pos + (field_at % size))
    code, _, err = run(str(data_dir))
    assert code == 1
    assert f"{segment} at byte {pos}:" in err.replace("\n", "")
    # The other partitions are still checked (and sound).
    code, out, _ = run(str(data_dir), "--json")
    problems = json.loads(out)["problems"]
    assert code == 1 and [(p["file"], p["position"]) for p in problems] == [(str(segment), pos)]


def test_a_bad_metadata_log_batch_and_a_bad_index_entry_are_named(data_dir: Path) -> None:
    metadata_segment = sorted((data_dir / "__cluster_metadata-0").glob("*.log"))[0]
    pos, size = batch_at(metadata_segment, 1)
    flip(metadata_segment, pos + size - 1)
    index = sorted((data_dir / "partitions" / "orders-0").glob("*.index"))[0]
    entries = bytearray(index.read_bytes())
    assert len(entries) >= 16
    struct.pack_into(">i", entries, 12, 7)  # entry 1 now points inside a batch
    index.write_bytes(bytes(entries))
    code, out, _ = run(str(data_dir), "--json")
    problems = {p["file"]: p["position"] for p in json.loads(out)["problems"]}
    assert code == 1
    assert problems == {str(index): 8, str(metadata_segment): pos}


def test_not_a_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    code, _, err = run(str(tmp_path))
    assert code != 0 and "holds no partition directories" in err
