"""The `kraftpy-log` Spark data source: every replica's segment files of a cluster directory as rows.

    spark.dataSource.register(KraftpyLogDataSource)
    records = spark.read.format("kraftpy-log").load("/path/to/cluster")          # one row per record
    replicas = spark.read.format("kraftpy-log").option("view", "replicas").load(...)  # one row per replica

Options: `path` (the cluster directory, as `kraftpy cluster start` lays it
out), `view` = records (default) or replicas, and `topics` (comma-separated;
default all). Each replica log is one Spark input partition, so a cluster of
many partitions is read in parallel by as many executors as there are; the
replica list itself comes from the driver (a directory listing). The rows are
made by spark_jobs.records, which decodes with the storage engine's reader.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.spark_jobs.records import RECORD_SCHEMA, REPLICA_SCHEMA, replica_info_row, replica_rows
from kraftpy.spark_jobs.replicas import ReplicaDir, discover

FORMAT_NAME = "kraftpy-log"
VIEWS = ("records", "replicas")


class ReplicaPartition(InputPartition):
    """One replica log: the unit of parallelism."""

    def __init__(self, replica: ReplicaDir) -> None:
        super().__init__(replica)
        self.replica = replica


def _options(options: dict[str, str]) -> tuple[str, str, frozenset[str] | None]:
    path = options.get("path")
    if not path:
        raise KafkaError("the kraftpy-log data source needs a cluster directory: load(PATH)", ErrorCode.INVALID_CONFIG)
    view = options.get("view", "records")
    if view not in VIEWS:
        raise KafkaError(f"view {view!r} is not one of {', '.join(VIEWS)}", ErrorCode.INVALID_CONFIG)
    topics = options.get("topics")
    chosen = frozenset(t.strip() for t in topics.split(",") if t.strip()) if topics else None
    return path, view, chosen


class KraftpyLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path, self.view, self.topics = _options(options)

    def partitions(self) -> list[InputPartition]:
        replicas = discover(Path(self.path))
        return [ReplicaPartition(r) for r in replicas if self.topics is None or r.topic in self.topics]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        replica = partition.replica  # type: ignore[attr-defined]
        if self.view == "replicas":
            yield replica_info_row(replica)
        else:
            yield from replica_rows(replica)


class KraftpyLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return REPLICA_SCHEMA if _options(self.options)[1] == "replicas" else RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftpyLogReader(self.options)
