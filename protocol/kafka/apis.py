"""The Kafka APIs and versions a kraftpy broker decodes, answers and advertises in ApiVersions.

Each range runs from Kafka 4.x's floor (KIP-896) to the newest version in
Kafka's message schemas, so old clients (aiokafka) and new ones (kafka-python
3.x, librdkafka) both find theirs. Produce v0-v2 are the one exception below
the floor: librdkafka before 2.11.1 turns compression off unless they are
advertised, so they are listed, decoded and answered with UNSUPPORTED_VERSION.
Notes: docs/kafka-codec.md, section "Notes from the code".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ApiRange:
    api_key: int
    name: str
    min_version: int
    max_version: int

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


_RANGES = (
    ApiRange(0, "Produce", 0, 13),
    ApiRange(1, "Fetch", 4, 18),
    ApiRange(2, "ListOffsets", 1, 11),
    ApiRange(3, "Metadata", 0, 13),
    ApiRange(8, "OffsetCommit", 2, 10),
    ApiRange(9, "OffsetFetch", 1, 10),
    ApiRange(10, "FindCoordinator", 0, 6),
    ApiRange(11, "JoinGroup", 0, 9),
    ApiRange(12, "Heartbeat", 0, 4),
    ApiRange(13, "LeaveGroup", 0, 5),
    ApiRange(14, "SyncGroup", 0, 5),
    ApiRange(15, "DescribeGroups", 0, 6),
    ApiRange(16, "ListGroups", 0, 5),
    ApiRange(18, "ApiVersions", 0, 4),
    ApiRange(19, "CreateTopics", 2, 7),
    ApiRange(20, "DeleteTopics", 1, 6),
    ApiRange(21, "DeleteRecords", 0, 2),
    ApiRange(22, "InitProducerId", 0, 6),
    ApiRange(23, "OffsetForLeaderEpoch", 2, 4),
    ApiRange(24, "AddPartitionsToTxn", 0, 4),
    ApiRange(25, "AddOffsetsToTxn", 0, 4),
    ApiRange(26, "EndTxn", 0, 4),
    ApiRange(27, "WriteTxnMarkers", 0, 1),
    ApiRange(28, "TxnOffsetCommit", 0, 4),
    ApiRange(32, "DescribeConfigs", 1, 4),
    ApiRange(33, "AlterConfigs", 0, 2),
    ApiRange(35, "DescribeLogDirs", 1, 5),
    ApiRange(37, "CreatePartitions", 0, 3),
    ApiRange(42, "DeleteGroups", 0, 2),
    ApiRange(43, "ElectLeaders", 0, 2),
    ApiRange(44, "IncrementalAlterConfigs", 0, 1),
    ApiRange(47, "OffsetDelete", 0, 0),
    ApiRange(60, "DescribeCluster", 0, 2),
    ApiRange(61, "DescribeProducers", 0, 0),
    ApiRange(65, "DescribeTransactions", 0, 0),
    ApiRange(66, "ListTransactions", 0, 1),
    ApiRange(75, "DescribeTopicPartitions", 0, 0),
)

SUPPORTED_APIS: dict[int, ApiRange] = {r.api_key: r for r in _RANGES}

PRODUCE = 0
FETCH = 1
METADATA = 3
OFFSET_FETCH = 9
LIST_GROUPS = 16
API_VERSIONS = 18
DESCRIBE_LOG_DIRS = 35
LIST_TRANSACTIONS = 66
DESCRIBE_TOPIC_PARTITIONS = 75
# Produce versions below Kafka 4's floor: decoded and answered, always with UNSUPPORTED_VERSION.
PRODUCE_REFUSED_BELOW = 3


def is_refused_version(api_key: int, api_version: int) -> bool:
    """True for a version we advertise only to refuse it (Produce v0-v2)."""
    return api_key == PRODUCE and api_version < PRODUCE_REFUSED_BELOW
