"""The clean-restart rule (broker/clean_restart.py): every branch, and files that are not ours."""

from __future__ import annotations

import json

import pytest

from kraftpy.broker.clean_restart import (
    MAX_RECORD_BYTES,
    RestartDecision,
    RestartRecord,
    Unreadable,
    decide,
    may_record_clean_shutdown,
    parse_boot_id,
    parse_record,
    record_at_start,
)

BOOT_A = "0b7e6b3c-5d1f-4a34-9a2e-1f0c2d3e4f50"
BOOT_B = "9c1d2e3f-0a1b-4c2d-8e3f-4a5b6c7d8e9f"


def rec(epoch: int = 7, boot: str | None = BOOT_A, clean: bool = False) -> RestartRecord:
    return RestartRecord(epoch, boot, clean)


@pytest.mark.parametrize(
    ("recorded", "boot_id", "epoch", "reason", "durable"),
    [
        (None, BOOT_A, -1, "no record", False),
        (Unreadable("torn"), BOOT_A, -1, "unreadable record: torn", False),
        (rec(epoch=-1), BOOT_A, -1, "no registration recorded", False),
        # An unclean start that never registered stays unclean, clean shutdown or not.
        (rec(epoch=-1, clean=True), BOOT_A, -1, "no registration recorded", True),
        (rec(clean=True), BOOT_A, 7, "clean shutdown", True),
        # A clean shutdown flushed everything: a reboot after it loses nothing.
        (rec(clean=True), BOOT_B, 7, "clean shutdown", True),
        (rec(clean=True), None, 7, "clean shutdown", True),
        (rec(), None, -1, "boot id unreadable", False),
        (rec(boot=None), BOOT_A, -1, "no boot id recorded", False),
        (rec(), BOOT_B, -1, "boot id changed", True),
        # A killed process leaves its writes in the page cache: same boot, nothing lost.
        (rec(), BOOT_A, 7, "same boot id", False),
    ],
)
def test_decide_every_branch(
    recorded: RestartRecord | Unreadable | None, boot_id: str | None, epoch: int, reason: str, durable: bool
) -> None:
    decision = decide(recorded, boot_id)
    assert decision == RestartDecision(epoch, reason, durable)
    assert decision.clean is (epoch != -1)
    assert decision.status() == {"previous_broker_epoch": epoch, "clean": epoch != -1, "reason": reason}


def test_the_start_record_keeps_the_decided_epoch_so_a_kill_before_registering_stays_unclean() -> None:
    unclean = decide(rec(), BOOT_B)
    written = record_at_start(unclean, BOOT_B)
    assert written == RestartRecord(-1, BOOT_B, False)
    # Killed before it registered, same boot: still -1, not the epoch of the run that lost its tail.
    assert decide(parse_record(written.encode()), BOOT_B).previous_broker_epoch == -1
    clean = decide(rec(clean=True), BOOT_A)
    assert record_at_start(clean, BOOT_A) == RestartRecord(7, BOOT_A, False)


def test_a_clean_shutdown_is_recorded_only_over_durable_logs_all_flushed() -> None:
    assert may_record_clean_shutdown(decide(rec(), BOOT_B), logs_flushed=True)
    assert may_record_clean_shutdown(decide(rec(clean=True), BOOT_A), logs_flushed=True)
    assert not may_record_clean_shutdown(decide(rec(clean=True), BOOT_A), logs_flushed=False)
    # Same boot after a kill: logs this run never reopens may still hold dirty pages.
    assert not may_record_clean_shutdown(decide(rec(), BOOT_A), logs_flushed=True)
    assert not may_record_clean_shutdown(decide(None, BOOT_A), logs_flushed=True)


def test_records_round_trip() -> None:
    for record in (rec(), rec(epoch=-1, boot=None, clean=True), rec(epoch=2**63 - 1)):
        assert parse_record(record.encode()) == record


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'{"broker_epoch": 7, "boot_id": "ab', "not JSON"),
        (b"[" * 3000, "not JSON"),  # deep nesting: a RecursionError, not a crash
        (b"[]", "expected an object"),
        (b'"x"', "expected an object"),
        (b'{"broker_epoch": 7, "boot_id": null}', "expected an object"),
        (b'{"broker_epoch": 7, "boot_id": null, "clean_shutdown": true, "x": 1}', "expected an object"),
        (b'{"broker_epoch": "7", "boot_id": null, "clean_shutdown": true}', "must be an integer"),
        (b'{"broker_epoch": true, "boot_id": null, "clean_shutdown": true}', "must be an integer"),
        (b'{"broker_epoch": 7.0, "boot_id": null, "clean_shutdown": true}', "must be an integer"),
        (b'{"broker_epoch": -2, "boot_id": null, "clean_shutdown": true}', "must be >= -1"),
        (b'{"broker_epoch": 9223372036854775808, "boot_id": null, "clean_shutdown": true}', "must be <="),
        (b'{"broker_epoch": 7, "boot_id": null, "clean_shutdown": 1}', "must be a boolean"),
        (b'{"broker_epoch": 7, "boot_id": null, "clean_shutdown": "true"}', "must be a boolean"),
        (b'{"broker_epoch": 7, "boot_id": 5, "clean_shutdown": false}', "not a boot id"),
        (b'{"broker_epoch": 7, "boot_id": "", "clean_shutdown": false}', "not a boot id"),
        (b'{"broker_epoch": 7, "boot_id": "../etc", "clean_shutdown": false}', "not a boot id"),
        (b'{"broker_epoch": 7, "boot_id": "\\u00e9", "clean_shutdown": false}', "not a boot id"),
        (json.dumps({"broker_epoch": 7, "boot_id": "a" * 200, "clean_shutdown": False}).encode(), "not a boot id"),
        (b" " * (MAX_RECORD_BYTES + 1), "larger than"),
    ],
)
def test_hostile_record_files_read_as_unreadable(raw: bytes, why: str) -> None:
    parsed = parse_record(raw)
    assert isinstance(parsed, Unreadable) and why in parsed.why, parsed
    decision = decide(parsed, BOOT_A)
    assert decision.previous_broker_epoch == -1 and decision.reason.startswith("unreadable record: ")
    assert not decision.logs_durable


def test_no_file_is_no_record() -> None:
    assert parse_record(None) is None


@pytest.mark.parametrize(
    ("raw", "boot_id"),
    [
        (BOOT_A.encode() + b"\n", BOOT_A),
        (BOOT_A.upper().encode(), BOOT_A),  # the same id however it is cased
        (None, None),
        (b"", None),
        (b"\n", None),
        (b"\xff" * 10, None),
        (b"not a boot id", None),
        (b"a" * 129, None),
    ],
)
def test_parse_boot_id(raw: bytes | None, boot_id: str | None) -> None:
    assert parse_boot_id(raw) == boot_id
