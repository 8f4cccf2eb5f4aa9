"""The `kraftpy-log` Spark data source: every replica's segment files of a cluster directory as rows.

Design notes: docs/audit.md, section "spark_jobs/datasource.py".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.spark_jobs.records import RECORD_SCHEMA, replica_rows
from kraftpy.spark_jobs.replicas import ReplicaDir, discover

FORMAT_NAME = "kraftpy-log"


class ReplicaPartition(InputPartition):
    """One replica log: the unit of parallelism."""

    def __init__(self, replica: ReplicaDir) -> None:
        super().__init__(replica)
        self.replica = replica


def _options(options: dict[str, str]) -> tuple[str, frozenset[str] | None]:
    path = options.get("path")
    if not path:
        raise KafkaError("the kraftpy-log data source needs a cluster directory: load(PATH)", ErrorCode.INVALID_CONFIG)
    topics = options.get("topics")
    chosen = frozenset(t.strip() for t in topics.split(",") if t.strip()) if topics else None
    return path, chosen


class KraftpyLogReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.path, self.topics = _options(options)

    def partitions(self) -> list[InputPartition]:
        replicas = discover(Path(self.path))
        return [ReplicaPartition(r) for r in replicas if self.topics is None or r.topic in self.topics]

    def read(self, partition: InputPartition) -> Iterator[tuple]:
        yield from replica_rows(partition.replica)  # type: ignore[attr-defined]


class KraftpyLogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT_NAME

    def schema(self) -> str:
        return RECORD_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftpyLogReader(self.options)
