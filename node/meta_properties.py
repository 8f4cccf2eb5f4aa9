"""KRaft's `meta.properties`: the cluster id and node id a data dir was formatted for.

A node refuses to start on a data dir that was never formatted, or that was
formatted for another cluster or another node, so two clusters can never mix
logs by a wrong path.
"""

from __future__ import annotations

import base64
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.storage.files import fsync_dir

FILE_NAME = "meta.properties"
VERSION = 1


def random_cluster_id() -> str:
    """A random UUID in Kafka's URL-safe base64 form (22 characters), as `kafka-storage random-uuid`."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@dataclass(frozen=True)
class MetaProperties:
    cluster_id: str
    node_id: int
    version: int = VERSION

    def render(self) -> str:
        return f"version={self.version}\ncluster.id={self.cluster_id}\nnode.id={self.node_id}\n"


def parse(text: str, path: Path) -> MetaProperties:
    values: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, eq, value = line.partition("=")
        if not eq:
            raise KafkaError(f"{path}:{lineno}: expected key=value, got {line!r}", ErrorCode.INVALID_CONFIG)
        values[key.strip()] = value.strip()
    try:
        return MetaProperties(values["cluster.id"], int(values["node.id"]), int(values.get("version", "1")))
    except (KeyError, ValueError) as exc:
        raise KafkaError(f"{path}: missing or bad {exc}", ErrorCode.INVALID_CONFIG) from None


def write(data_dir: Path, meta: MetaProperties, *, ignore_formatted: bool = False) -> bool:
    """Format `data_dir`; returns False when it was already formatted identically and that is allowed."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / FILE_NAME
    if path.exists():
        existing = parse(path.read_text(), path)
        if ignore_formatted and existing == meta:
            return False
        raise KafkaError(
            f"{data_dir} is already formatted (cluster {existing.cluster_id}, node {existing.node_id})",
            ErrorCode.INVALID_CONFIG,
        )
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(meta.render())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(data_dir)
    return True


def verify(data_dir: Path, node_id: int, cluster_id: str | None = None) -> MetaProperties:
    """The data dir's identity, checked against this node (and cluster, when known)."""
    path = data_dir / FILE_NAME
    if not path.exists():
        raise KafkaError(
            f"{data_dir} is not formatted; run `kraftpy storage format` first",
            ErrorCode.INCONSISTENT_CLUSTER_ID,
        )
    meta = parse(path.read_text(), path)
    if meta.node_id != node_id:
        raise KafkaError(
            f"{data_dir} was formatted for node {meta.node_id}, but this is node {node_id}",
            ErrorCode.INCONSISTENT_CLUSTER_ID,
        )
    if cluster_id is not None and meta.cluster_id != cluster_id:
        raise KafkaError(
            f"{data_dir} belongs to cluster {meta.cluster_id}, not {cluster_id}",
            ErrorCode.INCONSISTENT_CLUSTER_ID,
        )
    return meta
