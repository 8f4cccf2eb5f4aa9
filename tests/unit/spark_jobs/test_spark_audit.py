"""The PySpark replica audit on small real logs written by the storage engine, damaged on purpose.

One cluster directory holds one topic per case (each with three replicas on
nodes 1-3, written by PartitionLog exactly as brokers write them); each
damage is done to the files afterwards. One audit without a history checks
that every damaged topic shows its findings and the clean ones none; one with
a history finds the lost acknowledged writes and the duplicate that only the
history reveals. One SparkSession for the module (local[2], no UI).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

from kraftpy.broker.shell.log_manager import PARTITIONS_DIR
from kraftpy.protocol.records.batch import build_batch
from kraftpy.protocol.records.header import patch_offset_and_epoch
from kraftpy.spark_jobs.audit import plan_audit, run_audit
from kraftpy.spark_jobs.datasource import FORMAT_NAME
from kraftpy.spark_jobs.records import digest
from kraftpy.spark_jobs.report import render_html, to_json
from kraftpy.storage import LogConfig, PartitionLog
from kraftpy.storage.inspection import LogFileReader
from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry

NODES = (1, 2, 3)
EPOCHS = (0, 2, 3)  # the leader epoch of each of the three batches
PRODUCER_ID = 7


def value_of(topic: str, offset: int, partition: int = 0) -> bytes:
    if (topic, partition) == ("hist", 0) and offset in (2, 6):
        return b"dup"
    return f"{topic}-{partition}-{offset}".encode()


def batches_of(topic: str, partition: int = 0) -> list[bytes]:
    """Three batches of four records (offsets 0-11), epochs EPOCHS, from one idempotent producer."""
    out = []
    for i, epoch in enumerate(EPOCHS):
        base = 4 * i
        records = [(None, value_of(topic, o, partition), (), 1_000 + o) for o in range(base, base + 4)]
        out.append(
            build_batch(
                records,
                base_offset=base,
                partition_leader_epoch=epoch,
                producer_id=PRODUCER_ID,
                producer_epoch=0,
                base_sequence=base,
            )
        )
    return out


def replica_dir(root: Path, node: int, topic: str, partition: int = 0) -> Path:
    return root / f"node-{node}" / "data" / PARTITIONS_DIR / f"{topic}-{partition}"


def segment(root: Path, node: int, topic: str) -> Path:
    return replica_dir(root, node, topic) / f"{0:020d}.log"


def write_cluster(root: Path, partitions: list[tuple[str, int]]) -> None:
    entries = tuple(NodeEntry(n, "127.0.0.1", 19_000 + n, ("broker", "controller")) for n in NODES)
    ClusterLayout(root.resolve(), "audit-test-cluster", entries).save()
    for node in NODES:
        for topic, partition in partitions:
            directory = replica_dir(root, node, topic, partition)
            directory.mkdir(parents=True)
            with PartitionLog.open(directory, LogConfig(), now_ms=0) as log:
                for batch in batches_of(topic, partition):
                    log.append_as_follower(batch, now_ms=0)
                log.high_watermark = log.log_end_offset
                log.write_checkpoints()


def batch_positions(path: Path) -> list[int]:
    return [entry.position for entry in LogFileReader(path)]


def flip_value_byte(path: Path, value: bytes) -> int:
    data = bytearray(path.read_bytes())
    at = data.find(value)
    assert at >= 0, f"{value!r} not in {path}"
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    return at


def patch_epoch(path: Path, batch: int, epoch: int) -> None:
    data = bytearray(path.read_bytes())
    pos = batch_positions(path)[batch]
    base = int.from_bytes(data[pos : pos + 8], "big")
    patch_offset_and_epoch(data, pos, base, epoch)  # outside the CRC, as a buggy broker would write it
    path.write_bytes(bytes(data))


def break_magic(path: Path, batch: int) -> int:
    data = bytearray(path.read_bytes())
    pos = batch_positions(path)[batch]
    data[pos + 16] = 9  # magic: the structure is broken, nothing after it can be read
    path.write_bytes(bytes(data))
    return pos


def cut_batch(path: Path, batch: int) -> None:
    data = path.read_bytes()
    positions = [*batch_positions(path), len(data)]
    path.write_bytes(data[: positions[batch]] + data[positions[batch + 1] :])


def truncate_everywhere(root: Path, topic: str, offset: int) -> None:
    """Remove the records from `offset` on, on every replica, through the engine (files stay consistent)."""
    for node in NODES:
        with PartitionLog.open(replica_dir(root, node, topic), LogConfig(), now_ms=0) as log:
            log.truncate_to(offset)
            log.high_watermark = log.log_end_offset
            log.write_checkpoints()


def write_history(path: Path, topic: str, partitions: int) -> None:
    """Every record of `topic` acknowledged at its offset, except the second copy of the duplicate."""
    lines = []
    for partition in range(partitions):
        for offset in range(12):
            if (topic, partition, offset) == ("hist", 0, 6):
                continue  # "dup" was sent once (acknowledged at offset 2); a second copy is a duplicate
            message = value_of(topic, offset, partition).decode()
            lines.append({"process": 0, "type": "invoke", "f": "send", "key": partition, "value": message})
            ok = {"process": 0, "type": "ok", "f": "send", "key": partition, "value": message, "offset": offset}
            lines.append(ok)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("audit") / "cluster"
    write_cluster(root, [(t, 0) for t in ("clean", "crc", "corrupt", "lineage", "gap", "hist")] + [("hist", 1)])
    where: dict[str, object] = {"root": root}
    where["crc"] = (segment(root, 2, "crc"), flip_value_byte(segment(root, 2, "crc"), b"crc-0-5"))
    where["corrupt"] = (segment(root, 3, "corrupt"), break_magic(segment(root, 3, "corrupt"), 1))
    patch_epoch(segment(root, 1, "lineage"), 2, 1)
    cut_batch(segment(root, 2, "gap"), 1)
    truncate_everywhere(root, "hist", 8)
    history = root.parent / "history.jsonl"
    write_history(history, "hist", 2)
    where["history"] = history
    return where


def kinds_by_topic(findings: list[dict]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for f in findings:
        out[f["topic"]].add(f["kind"])
    return out


def test_data_source_reads_every_record_of_every_replica(spark, cluster) -> None:
    root = cluster["root"]
    df = spark.read.format(FORMAT_NAME).option("topics", "clean").load(str(root))
    assert df.rdd.getNumPartitions() == len(NODES)  # one Spark partition per replica log
    rows = df.orderBy("node", "offset").collect()
    assert len(rows) == 12 * len(NODES)
    for row in rows:
        assert row.problem is None and row.crc_ok
        assert row.value_hash == digest(value_of("clean", row.offset))
        assert row.value_preview == value_of("clean", row.offset).decode()
        assert row.leader_epoch == row.checkpoint_epoch == EPOCHS[row.offset // 4]
        assert (row.batch_base_offset, row.batch_last_offset) == (row.offset // 4 * 4, row.offset // 4 * 4 + 3)
        assert (row.producer_id, row.producer_epoch, row.sequence) == (PRODUCER_ID, 0, row.offset)
        assert row.timestamp == 1_000 + row.offset
        assert row.file == str(segment(root, row.node, "clean"))


def test_audit_finds_each_damage_and_nothing_on_clean_replicas(spark, cluster, tmp_path: Path) -> None:
    result = run_audit(spark, plan_audit(cluster["root"]))
    kinds = kinds_by_topic(result.findings)
    assert "clean" not in kinds and "hist" not in kinds  # nothing without a history says what was acknowledged
    assert kinds["crc"] == {"crc", "divergence"}
    assert kinds["corrupt"] == {"corrupt", "divergence"}
    assert kinds["lineage"] == {"epoch_lineage", "divergence"}
    assert kinds["gap"] == {"gap", "divergence"}
    by = defaultdict(list)
    for f in result.findings:
        by[(f["topic"], f["kind"])].append(f)
    crc_file, crc_at = cluster["crc"]
    (crc,) = by[("crc", "crc")]
    assert crc["nodes"] == "2" and crc["file"] == str(crc_file) and crc["offset"] == 4
    assert crc["position"] == batch_positions(crc_file)[1] < crc_at
    (diverged,) = by[("crc", "divergence")]
    assert diverged["offset"] == 5 and "crc-0-5" in diverged["detail"] and "crc-0-4" not in diverged["detail"]
    corrupt_file, corrupt_at = cluster["corrupt"]
    (corrupt,) = by[("corrupt", "corrupt")]
    assert (corrupt["nodes"], corrupt["file"], corrupt["position"]) == ("3", str(corrupt_file), corrupt_at)
    assert sorted(f["offset"] for f in by[("corrupt", "divergence")]) == list(range(4, 12))
    assert {f["nodes"] for f in by[("corrupt", "divergence")]} == {"3"}
    lineage = by[("lineage", "epoch_lineage")]
    assert {f["nodes"] for f in lineage} == {"1"} and {f["offset"] for f in lineage} == {8}
    details = " | ".join(f["detail"] for f in lineage)
    assert "leader epoch 1 after epoch 2" in details and "checkpoint says 3" in details
    (gap,) = by[("gap", "gap")]
    assert (gap["nodes"], gap["offset"]) == ("2", 4) and "4-7" in gap["detail"]
    assert sorted(f["offset"] for f in by[("gap", "divergence")]) == list(range(4, 8))
    clean = {r["node"]: r for r in result.replicas if r["topic"] == "clean"}
    assert sorted(clean) == list(NODES)
    assert all((r["high_watermark"], r["log_start_offset"], r["records"]) == (12, 0, 12) for r in clean.values())
    page = render_html(result)
    assert "crc-0-5" in page and "CRC32C does not match" in page
    assert json.loads(json.dumps(to_json(result)))["ok"] is False


def test_history_reveals_lost_acked_writes_and_duplicates(spark, cluster) -> None:
    result = run_audit(spark, plan_audit(cluster["root"], cluster["history"], "hist"))
    hist = [f for f in result.findings if f["topic"] == "hist"]
    assert {f["partition"] for f in hist} == {0}  # partition 1 is whole, and all of it acknowledged
    lost = sorted(f["offset"] for f in hist if f["kind"] == "lost_write")
    assert lost == [8, 9, 10, 11]  # acknowledged, then removed from every replica
    dups = [f for f in hist if f["kind"] == "duplicate"]
    assert sorted(f["nodes"] for f in dups) == ["1", "2", "3"]  # every replica holds both copies
    assert {f["detail"] for f in dups} == {"value dup is at offsets 2,6"}
    assert {f["kind"] for f in hist} == {"lost_write", "duplicate"}
