"""`kraftpy log dump`: tables and JSON for .log, .index, .timeindex and checkpoint files; exit 1 on corruption."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kraftpy.protocol.records.batch import build_batch
from kraftpy.tools.cli import main
from tests.unit.storage.test_storage_fixtures import open_log

BATCH_KEYS = [
    "base_offset",
    "last_offset",
    "leader_epoch",
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "count",
    "compression",
    "crc_valid",
    "position",
    "size",
]


@pytest.fixture
def partition(tmp_path: Path) -> Path:
    directory = tmp_path / "orders-0"
    with open_log(directory, segment_bytes=700, index_interval_bytes=60) as log:
        for i in range(8):
            records = [(f"k{i}".encode(), f"value {i}".encode() * 8, (("trace", b"\xff\x00"),), 1000 + i)]
            records.append((b"\x80binary", None, (), 1000 + i))  # a non-UTF-8 key and a tombstone
            log.append_as_leader(build_batch(records, compression=1 if i % 2 else 0), i // 3, now_ms=0)
    return directory


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["log", "dump", *args])
    return result.exit_code, result.stdout, result.stderr


def seg(directory: Path, base: int, suffix: str = ".log") -> str:
    return str(directory / f"{base:020d}{suffix}")


def test_json_lines_have_exactly_the_documented_keys(partition: Path) -> None:
    code, out, _ = run("--json", seg(partition, 0))
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    assert [list(obj) for obj in lines] == [BATCH_KEYS] * len(lines)


def test_json_offsets_positions_and_codecs(partition: Path) -> None:
    _, out, _ = run("--json", seg(partition, 0))
    lines = [json.loads(line) for line in out.splitlines()]
    assert [(o["base_offset"], o["last_offset"], o["leader_epoch"]) for o in lines] == [
        (2 * i, 2 * i + 1, i // 3) for i in range(len(lines))
    ]
    assert lines[0]["position"] == 0 and lines[1]["position"] == lines[0]["size"]
    assert [o["compression"] for o in lines[:2]] == ["none", "gzip"]
    assert all(o["crc_valid"] and o["count"] == 2 and o["producer_id"] == -1 for o in lines)


def test_print_records_shows_text_or_base64(partition: Path) -> None:
    code, out, _ = run("--json", "--print-records", seg(partition, 0))
    assert code == 0
    first = json.loads(out.splitlines()[1])
    assert list(first) == [*BATCH_KEYS, "records"]
    text, binary = first["records"]
    assert text == {
        "offset": 2,
        "timestamp": 1001,
        "key": "k1",
        "value": "value 1" * 8,
        "headers": [{"key": "trace", "value_b64": base64.b64encode(b"\xff\x00").decode()}],
    }
    assert binary == {
        "offset": 3,
        "timestamp": 1001,
        "key_b64": base64.b64encode(b"\x80binary").decode(),
        "value": None,
        "headers": [],
    }


def test_tables_for_people(partition: Path) -> None:
    code, out, _ = run(seg(partition, 0))
    assert code == 0
    assert "position" in out and "crc" in out and "gzip" in out and "0..1" in out
    code, out, _ = run("--print-records", seg(partition, 0))
    assert code == 0 and "value 0value 0" in out and "base64:" in out


def test_index_and_checkpoint_files_and_directories(partition: Path) -> None:
    code, out, _ = run("--json", seg(partition, 0, ".index"))
    assert code == 0
    entries = [json.loads(line) for line in out.splitlines()]
    assert entries and all(set(e) == {"offset", "position"} for e in entries)
    code, out, _ = run("--json", seg(partition, 0, ".timeindex"))
    assert code == 0 and all(set(json.loads(line)) == {"timestamp", "offset"} for line in out.splitlines())
    code, out, _ = run("--json", str(partition / "leader-epoch-checkpoint"))
    assert code == 0 and json.loads(out) == {"entries": [[0, 0], [1, 6], [2, 12]]}
    code, out, _ = run("--json", str(partition))
    assert code == 0
    files = [json.loads(line)["file"] for line in out.splitlines() if line.startswith('{"file"')]
    assert files[:3] == [seg(partition, 0), seg(partition, 0, ".index"), seg(partition, 0, ".timeindex")]
    assert files[-1].endswith("recovery-point-offset-checkpoint")


def test_a_bad_crc_exits_1_names_the_batch_and_keeps_printing(partition: Path) -> None:
    path = Path(seg(partition, 0))
    _, out, _ = run("--json", str(path))
    second = json.loads(out.splitlines()[1])
    data = bytearray(path.read_bytes())
    data[second["position"] + 70] ^= 0x01
    path.write_bytes(bytes(data))
    code, out, err = run("--json", str(path))
    assert code == 1
    lines = [json.loads(line) for line in out.splitlines()]
    assert [o["crc_valid"] for o in lines[:3]] == [True, False, True]
    assert f"position {second['position']}" in err and "offset 2" in err and "CRC" in err


def test_a_torn_tail_exits_1_after_printing_the_sound_batches(partition: Path) -> None:
    path = Path(seg(partition, 0))
    _, out, _ = run("--json", str(path))
    lines = [json.loads(line) for line in out.splitlines()]
    path.write_bytes(path.read_bytes()[:-5])
    code, out, err = run("--json", str(path))
    assert code == 1
    assert [json.loads(line) for line in out.splitlines()] == lines[:-1]
    assert f"position {lines[-1]['position']}" in err


def test_an_index_entry_that_disagrees_with_the_log_exits_1(partition: Path) -> None:
    index = Path(seg(partition, 0, ".index"))
    data = bytearray(index.read_bytes())
    data[7] ^= 0x01  # the first entry's position is now off by one
    index.write_bytes(bytes(data))
    code, out, err = run("--json", str(index))
    assert code == 1
    assert "error" in json.loads(out.splitlines()[0])
    assert "entry 0" in err


def test_the_installed_command_runs(partition: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "log", "dump", "--json", seg(partition, 0)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[0])["base_offset"] == 0
