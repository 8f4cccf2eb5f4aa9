"""broker_epoch.json on disk (broker/shell/restart_record.py): start, registrations, stop, and hostile files."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from kraftpy.broker.clean_restart import RestartDecision
from kraftpy.broker.shell.restart_record import FILE_NAME, RestartRecordFile, read_bounded

BOOT_A = "0b7e6b3c-5d1f-4a34-9a2e-1f0c2d3e4f50"
BOOT_B = "9c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f"


def boot(tmp_path: Path, boot_id: str) -> Path:
    path = tmp_path / "boot_id"
    path.write_text(boot_id + "\n")
    return path


def on_disk(tmp_path: Path) -> dict:
    return json.loads((tmp_path / FILE_NAME).read_text())


def test_a_life_cycle_of_starts_registrations_and_stops(tmp_path: Path) -> None:
    boot_path = boot(tmp_path, BOOT_A)
    first = RestartRecordFile(tmp_path, boot_path)
    assert first.at_start().status() == {"previous_broker_epoch": -1, "clean": False, "reason": "no record"}
    assert on_disk(tmp_path) == {"broker_epoch": -1, "boot_id": BOOT_A, "clean_shutdown": False}
    first.registered(5)
    assert on_disk(tmp_path) == {"broker_epoch": 5, "boot_id": BOOT_A, "clean_shutdown": False}
    first.stopped(logs_flushed=True)  # the first run's start was not known durable: no marker
    assert on_disk(tmp_path)["clean_shutdown"] is False

    killed = RestartRecordFile(tmp_path, boot_path)  # after a SIGKILL, same boot
    assert killed.at_start().status() == {"previous_broker_epoch": 5, "clean": True, "reason": "same boot id"}
    killed.registered(9)

    boot(tmp_path, BOOT_B)  # a power loss
    rebooted = RestartRecordFile(tmp_path, boot_path)
    assert rebooted.at_start().reason == "boot id changed" and rebooted.decision.previous_broker_epoch == -1
    assert on_disk(tmp_path) == {"broker_epoch": -1, "boot_id": BOOT_B, "clean_shutdown": False}
    rebooted.registered(12)
    rebooted.stopped(logs_flushed=False)  # a log failed: no marker
    assert on_disk(tmp_path)["clean_shutdown"] is False
    rebooted.stopped(logs_flushed=True)
    assert on_disk(tmp_path) == {"broker_epoch": 12, "boot_id": BOOT_B, "clean_shutdown": True}

    boot(tmp_path, BOOT_A)  # rebooted again while stopped: nothing lost after a clean shutdown
    after = RestartRecordFile(tmp_path, boot_path)
    assert after.at_start().status() == {"previous_broker_epoch": 12, "clean": True, "reason": "clean shutdown"}
    # Marked not clean before serving: a power loss during this run must not pass for a clean restart.
    assert on_disk(tmp_path) == {"broker_epoch": 12, "boot_id": BOOT_A, "clean_shutdown": False}


def test_an_unreadable_boot_id_leaves_only_the_clean_shutdown_rule(tmp_path: Path) -> None:
    boot_path = boot(tmp_path, BOOT_A)
    RestartRecordFile(tmp_path, boot_path).at_start()
    RestartRecordFile(tmp_path, boot_path).registered(3)
    decision = RestartRecordFile(tmp_path, tmp_path / "missing").at_start()
    assert (decision.previous_broker_epoch, decision.reason) == (-1, "boot id unreadable")
    boot_path.write_bytes(b"\x00garbage")
    assert RestartRecordFile(tmp_path, boot_path).at_start().reason == "no registration recorded"


def test_the_real_boot_id_is_read_when_there_is_one(tmp_path: Path) -> None:
    real = Path("/proc/sys/kernel/random/boot_id")
    if not real.exists():
        pytest.skip("no /proc boot id here")
    record = RestartRecordFile(tmp_path, real)
    record.at_start()
    assert record.boot_id == real.read_text().strip()


@pytest.mark.parametrize("kind", ["garbage", "huge", "fifo", "dev_zero_link", "unreadable_json_types"])
def test_hostile_record_files_never_stop_the_start(tmp_path: Path, kind: str) -> None:
    path = tmp_path / FILE_NAME
    if kind == "garbage":
        path.write_bytes(os.urandom(300))
    elif kind == "huge":
        path.write_bytes(b"{" + b" " * 10_000_000 + b"}")
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading must not wait for a writer
    elif kind == "dev_zero_link":
        path.symlink_to("/dev/zero")  # endless: the read is bounded, and not a regular file anyway
    else:
        path.write_text(json.dumps({"broker_epoch": [1], "boot_id": {}, "clean_shutdown": None}))
    record = RestartRecordFile(tmp_path, boot(tmp_path, BOOT_A))
    decided: list[RestartDecision] = []
    # In a daemon thread, bounded: a start that waits on the FIFO for a writer fails here instead of hanging.
    starting = threading.Thread(target=lambda: decided.append(record.at_start()), daemon=True)
    starting.start()
    starting.join(10)
    assert decided, "the start hung on the record file"
    assert decided[0].previous_broker_epoch == -1 and decided[0].reason.startswith("unreadable record: ")
    assert on_disk(tmp_path) == {"broker_epoch": -1, "boot_id": BOOT_A, "clean_shutdown": False}


def test_read_bounded_stops_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 100_000)
    assert len(read_bounded(path, 10) or b"") == 11
    assert read_bounded(tmp_path / "absent", 10) is None


def test_a_record_that_cannot_be_rewritten_at_start_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).mkdir()  # a directory in its place: the rename over it fails
    with pytest.raises(OSError):
        RestartRecordFile(tmp_path, boot(tmp_path, BOOT_A)).at_start()


def test_a_failed_write_after_start_is_logged_and_leaves_the_older_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    record = RestartRecordFile(tmp_path, boot(tmp_path, BOOT_A))
    record.at_start()
    record.path = tmp_path / "gone" / FILE_NAME  # its directory vanished: every write fails
    record.registered(4)
    assert "cannot record broker epoch 4" in caplog.text
    assert record.record is not None and record.record.broker_epoch == -1
