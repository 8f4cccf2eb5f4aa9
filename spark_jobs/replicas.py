"""Finding every replica log of a cluster directory and reading its checkpoints (no Spark here).

A cluster directory is what `kraftpy cluster start` lays out (tools/cluster_layout.py):
`cluster.json` and, per node, `node-N/data/partitions/<topic>-<partition>/`. Each
such partition directory on each node is one replica; the audit reads its
segments on the executors and its checkpoints here, on the driver, because they
are a few bytes each. Each voter's Raft log (`node-N/data/__cluster_metadata-0/`, Kafka v2
batches in the storage engine's files, raft/entry_batches.py) is one more replica, of the
topic `__cluster_metadata`: the same checks then say that every voter's log is identical
below the commit index (the lowest checkpointed high watermark of the voters).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kraftpy.broker.shell.log_manager import DELETE_SUFFIX, PARTITIONS_DIR, STRAY_SUFFIX
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.storage import CorruptCheckpointError, LeaderEpochCache, layout
from kraftpy.storage.inspection import read_checkpoint_file
from kraftpy.tools.cluster_layout import ClusterLayout

# Kafka's internal compacted topic; any topic whose replica has a cleaner checkpoint is compacted too.
COMPACTED_INTERNAL_TOPICS = frozenset({"__consumer_offsets"})
METADATA_TOPIC = "__cluster_metadata"
METADATA_LOG_DIR = f"{METADATA_TOPIC}-0"  # raft.shell.durable_log.METADATA_LOG_DIR
VOTER_ROLE = "controller"


@dataclass(frozen=True)
class ReplicaDir:
    """One partition directory on one node."""

    node_id: int
    topic: str
    partition: int
    path: str  # a str so it pickles to Spark executors as is


@dataclass(frozen=True)
class ReplicaInfo:
    """What a replica's checkpoints say; `problems` names every checkpoint that could not be read."""

    replica: ReplicaDir
    high_watermark: int | None
    log_start_offset: int
    recovery_point: int | None
    epochs: tuple[tuple[int, int], ...]  # (epoch, start offset) from the leader-epoch checkpoint
    compacted: bool
    problems: tuple[str, ...]


def discover(cluster_dir: Path) -> list[ReplicaDir]:
    """Every replica directory under a cluster directory; KafkaError(INVALID_CONFIG) for a bad directory."""
    if not cluster_dir.is_dir():
        raise KafkaError(f"{cluster_dir} is not a directory", ErrorCode.INVALID_CONFIG)
    cluster = ClusterLayout.load(cluster_dir)
    found: list[ReplicaDir] = []
    for node in cluster.nodes:
        data_dir = cluster.data_dir(node)
        if not data_dir.is_dir():
            raise KafkaError(f"node {node.node_id} has no data directory at {data_dir}", ErrorCode.INVALID_CONFIG)
        raft_log = data_dir / METADATA_LOG_DIR
        if VOTER_ROLE in node.roles and raft_log.is_dir():
            found.append(ReplicaDir(node.node_id, METADATA_TOPIC, 0, str(raft_log)))
        root = data_dir / PARTITIONS_DIR
        if not root.is_dir():
            continue  # a node that never hosted a partition
        for child in sorted(root.iterdir()):
            if not child.is_dir() or child.name.endswith((DELETE_SUFFIX, STRAY_SUFFIX)):
                continue  # directories of deleted topics or stray replicas are not part of the cluster's logs
            parsed = layout.parse_partition_dir_name(child.name)
            if parsed is not None:
                found.append(ReplicaDir(node.node_id, parsed[0], parsed[1], str(child)))
    return found


def segment_files(replica: ReplicaDir) -> list[Path]:
    """The replica's .log segment files in offset order (cleaner temp files are not segments)."""
    logs = []
    for path in Path(replica.path).iterdir():
        parsed = layout.parse_segment_name(path.name)
        if parsed is not None and parsed[1] == layout.LOG_SUFFIX:
            logs.append((parsed[0], path))
    return [path for _, path in sorted(logs)]


def _single(directory: Path, name: str, problems: list[str]) -> int | None:
    entries, problem = read_checkpoint_file(directory / name)
    if problem is not None:
        if problem.message != "does not exist":
            problems.append(f"{directory / name}: {problem.message}")
        return None
    if len(entries) != 1 or entries[0][0] < 0:
        problems.append(f"{directory / name}: expected one offset >= 0, holds {entries}")
        return None
    return entries[0][0]


def read_info(replica: ReplicaDir) -> ReplicaInfo:
    """The replica's high watermark, log start, recovery point and epochs; never raises for a bad file."""
    directory = Path(replica.path)
    problems: list[str] = []
    hw = _single(directory, layout.HIGH_WATERMARK_CHECKPOINT, problems)
    log_start = _single(directory, layout.LOG_START_OFFSET_CHECKPOINT, problems)
    recovery = _single(directory, layout.RECOVERY_POINT_CHECKPOINT, problems)
    epoch_rows, problem = read_checkpoint_file(directory / layout.LEADER_EPOCH_CHECKPOINT)
    if problem is not None and problem.message != "does not exist":
        problems.append(f"{directory / layout.LEADER_EPOCH_CHECKPOINT}: {problem.message}")
    epochs = tuple((int(e), int(o)) for e, o in epoch_rows)
    try:
        LeaderEpochCache(None, lambda: 0, epochs)  # the cache's own check: epochs and offsets strictly increase
    except CorruptCheckpointError as exc:
        problems.append(f"epoch lineage: {exc.message}")
        epochs = ()
    compacted = replica.topic in COMPACTED_INTERNAL_TOPICS or (directory / layout.CLEANER_OFFSET_CHECKPOINT).exists()
    return ReplicaInfo(
        replica,
        hw,
        log_start or 0,
        recovery,
        epochs,
        compacted,
        tuple(problems),
    )
