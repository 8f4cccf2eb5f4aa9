"""LogManager: partition directories keyed by topic id, deletion, strays, background jobs; settings."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest

from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.shell.log_manager import LogManager, read_partition_metadata
from kraftpy.protocol.records.batch import build_batch
from kraftpy.storage import LogConfig, LogStorageError


def manager(root: Path) -> LogManager:
    return LogManager(root, ReplicaManagerSettings(log_cleaner_enable=False), lambda: [])


def test_a_directory_of_another_topic_id_is_replaced_by_an_empty_log(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    old_id, new_id = uuid.uuid4(), uuid.uuid4()
    plog = logs.open_log("t", old_id, 0, LogConfig())
    plog.append_as_leader(build_batch([(None, b"old")]), 0, now_ms=0)
    plog.close()
    assert read_partition_metadata(tmp_path / "partitions" / "t-0") == old_id
    plog = logs.open_log("t", new_id, 0, LogConfig())  # topic deleted while we were away, created again
    assert plog.log_end_offset == 0 and read_partition_metadata(plog.directory) == new_id
    assert not plog.flush_inline  # fsyncs belong to the flush loop, not to appends on the event loop
    plog.close()
    reopened = logs.open_log("t", new_id, 0, LogConfig())
    assert reopened.log_end_offset == 0
    reopened.close()


def test_deleting_frees_the_path_at_once_and_strays_are_renamed_not_deleted(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    topic_id = uuid.uuid4()
    plog = logs.open_log("gone", topic_id, 0, LogConfig())
    plog.append_as_leader(build_batch([(None, b"x")]), 0, now_ms=0)
    logs.delete_log(plog, topic_id)  # no running loop: removed synchronously
    assert not (tmp_path / "partitions" / "gone-0").exists()
    assert logs.open_log("gone", uuid.uuid4(), 0, LogConfig()).log_end_offset == 0
    stray = logs.open_log("stray", uuid.uuid4(), 3, LogConfig())
    stray.close()
    assert logs.mark_strays({"gone-0"}) == ["stray-3"]
    names = sorted(p.name for p in (tmp_path / "partitions").iterdir())
    assert names[0] == "gone-0" and names[1].startswith("stray-3.") and names[1].endswith("-stray")
    assert logs.mark_strays(set()) == []  # only on the first full image


async def test_background_jobs_flush_checkpoint_and_apply_retention(tmp_path: Path) -> None:
    logs = manager(tmp_path)
    plog = logs.open_log("r", uuid.uuid4(), 0, LogConfig(segment_bytes=200, retention_bytes=250))
    for i in range(12):
        plog.append_as_leader(build_batch([(None, b"v" * 40)], base_offset=0), 0, now_ms=i)
    plog.high_watermark = plog.log_end_offset
    events: list[str] = []
    hosted = SimpleNamespace(
        log=plog,
        name="r-0",
        offline=None,
        stopped=False,
        after_retention=lambda: events.append("retention"),
        go_offline=lambda reason: events.append(reason),
    )
    logs._partitions = lambda: [hosted]  # type: ignore[assignment,list-item]
    await logs.flush_once()
    assert plog.recovery_point >= plog.active_segment_base_offset  # rolled segments are durable
    await logs.checkpoint_once()
    await logs.retention_once()
    assert events == ["retention"] and plog.log_start_offset > 0
    await logs.close_logs([hosted])  # type: ignore[list-item]
    assert plog.closed


async def test_close_logs_says_whether_every_log_was_flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clean-shutdown record relies on it (broker/shell/restart_record.py)."""

    def hosted(name: str) -> SimpleNamespace:
        plog = logs.open_log(name, uuid.uuid4(), 0, LogConfig())
        plog.append_as_leader(build_batch([(None, b"v")]), 0, now_ms=0)
        return SimpleNamespace(log=plog)

    logs = manager(tmp_path)
    assert await logs.close_logs([hosted("a"), hosted("b")])  # type: ignore[list-item]
    logs = manager(tmp_path)
    failing = hosted("c")

    def fsync_fails(up_to_offset: int | None = None) -> None:
        raise LogStorageError("fsync failed: EIO")

    monkeypatch.setattr(failing.log, "flush", fsync_fails)
    assert not await logs.close_logs([hosted("d"), failing])  # type: ignore[list-item]
    logs = manager(tmp_path)
    failed_earlier = hosted("e")
    failed_earlier.log._failed = "a write failed"  # as after an append's I/O error: close() skips the flush
    assert not await logs.close_logs([failed_earlier])  # type: ignore[list-item]
    assert failed_earlier.log.closed


def test_settings_take_node_config_values_and_reject_nonsense() -> None:
    config = SimpleNamespace(
        replica_lag_time_max_ms=1234, min_insync_replicas=2, controller_quorum_request_timeout_ms=777
    )
    settings = ReplicaManagerSettings.from_node_config(config, replica_fetch_wait_max_ms=50)
    assert (settings.replica_lag_time_max_ms, settings.min_insync_replicas) == (1234, 2)
    assert (settings.controller_request_timeout_ms, settings.replica_fetch_wait_max_ms) == (777, 50)
    with pytest.raises(ValueError, match="replica_lag_time_max_ms and replica_tick_interval_ms must be positive"):
        ReplicaManagerSettings(replica_lag_time_max_ms=0)
    with pytest.raises(ValueError, match="queued_max_requests must not be negative, got -1"):
        ReplicaManagerSettings(queued_max_requests=-1)
