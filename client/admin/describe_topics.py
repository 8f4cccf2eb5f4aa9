"""describe_topics' two sources (sans-I/O): DescribeTopicPartitions paged by its cursor, else Metadata.

`uses_describe_topic_partitions` decides from a broker's negotiated versions;
`TopicPartitionsPaging` builds each page's request from the last answer's
cursor and gathers the partitions, in a bounded number of pages;
`from_metadata` reads a Metadata snapshot (no ELR). The AdminClient
(client/shell/admin.py) does the asking.
Notes: docs/client.md, section "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kraftpy.client.admin.types import PartitionDescription, TopicDescription
from kraftpy.client.errors import error_from, malformed
from kraftpy.client.metadata import Cluster
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.apis import DESCRIBE_TOPIC_PARTITIONS

DESCRIBE_TOPIC_PARTITIONS_PATH = "/kafka/describe_topic_partitions"
# Kafka's AdminClient asks for pages this size (DescribeTopicsOptions.partitionSizeLimitPerResponse),
# which is also the broker's clamp (max.request.partition.size.limit).
PAGE_PARTITION_LIMIT = 2000
# A broker that answers a cursor for ever (a bug, or hostile) must not hold the call until its
# timeout: 1000 full pages are two million partitions, far past any cluster's.
MAX_PAGES = 1000


def uses_describe_topic_partitions(versions: Mapping[int, int]) -> bool:
    """Whether the broker whose negotiated `versions` these are serves DescribeTopicPartitions.

    Kafka before 3.8 (and any broker that does not advertise key 75) lacks it: Metadata then.
    """
    return DESCRIBE_TOPIC_PARTITIONS in versions


def missing_topic(name: str, code: int = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION) -> KafkaError:
    return KafkaError(f"topic {name!r} does not exist or has no partitions", code)


def from_metadata(cluster: Cluster, names: Sequence[str]) -> dict[str, TopicDescription]:
    """The topics as a Metadata snapshot has them; the first missing one raises, naming it."""
    out = {}
    for name in names:
        partitions = cluster.partitions_for_topic(name)
        if not partitions:
            raise missing_topic(name, cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
        out[name] = TopicDescription(
            name,
            cluster.topic_ids.get(name),
            tuple(
                PartitionDescription(
                    p.partition, p.leader_id if p.has_leader else None, p.leader_epoch, p.replicas, p.isr
                )
                for p in partitions
            ),
        )
    return out


def _nodes(value: Any) -> tuple[int, ...]:
    return tuple(int(n) for n in value or ())


class TopicPartitionsPaging:
    """One describe_topics call over DescribeTopicPartitions: `request()` for the next page until `done`,
    each answer to `on_answer`, then `descriptions()`. Paging stops after `max_pages` or at a cursor that
    does not move forward (CORRUPT_MESSAGE): the pages are fetched one after another, never for ever."""

    def __init__(self, names: Sequence[str], *, page_limit: int | None = None, max_pages: int | None = None) -> None:
        self.names = list(dict.fromkeys(names))
        if not self.names:
            # An empty list asks the broker for every topic: not what describing no topics means.
            raise ValueError("describe at least one topic")
        # Read at call time, not bound as defaults, so a test can shrink them for the whole client.
        self.page_limit = PAGE_PARTITION_LIMIT if page_limit is None else page_limit
        self.max_pages = MAX_PAGES if max_pages is None else max_pages
        self.pages = 0
        self.cursor: tuple[str, int] | None = None
        self.done = False
        self._errors: dict[str, KafkaError] = {}
        self._ids: dict[str, Any] = {}
        self._partitions: dict[str, dict[int, PartitionDescription]] = {n: {} for n in self.names}

    def request(self) -> dict[str, Any]:
        """The body of the next page's request (the same topics every time, from the cursor on)."""
        cursor = None if self.cursor is None else {"topic_name": self.cursor[0], "partition_index": self.cursor[1]}
        return {"topics": list(self.names), "response_partition_limit": self.page_limit, "cursor": cursor}

    def on_answer(self, body: Mapping[str, Any]) -> None:
        """Take one page; KafkaError (CORRUPT_MESSAGE) when the paging cannot go on."""
        if self.done:
            raise ValueError("the paging is done")
        self.pages += 1
        for topic in body.get("topics") or []:
            name = topic.get("name")
            if name not in self._partitions:
                continue  # not asked for: nothing to place it in
            if topic.get("error_code"):
                self._errors.setdefault(name, error_from(topic["error_code"], str(topic.get("message") or "")))
                continue
            self._ids.setdefault(name, topic.get("topic_id"))
            for p in topic.get("partitions") or []:
                leader = p.get("leader_id")
                self._partitions[name][int(p["partition"])] = PartitionDescription(
                    partition=int(p["partition"]),
                    leader=leader if isinstance(leader, int) and leader >= 0 else None,
                    leader_epoch=int(p.get("leader_epoch", -1)),
                    replicas=_nodes(p.get("replica_nodes")),
                    isr=_nodes(p.get("isr_nodes")),
                    elr=_nodes(p.get("elr")),
                    last_known_elr=_nodes(p.get("last_known_elr")),
                )
        self._next(body.get("next_cursor"))

    def _next(self, cursor: Mapping[str, Any] | None) -> None:
        if cursor is None:
            self.done = True
            return
        at = (str(cursor.get("topic_name")), int(cursor.get("partition_index", -1)))
        if at[0] not in self._partitions or at[1] < 0:
            raise malformed("describe_topic_partitions", f"next cursor {at} is outside the topics asked for")
        # The broker pages topics by name, then partitions by index: a cursor that does not move
        # forward would ask for the same page again, and again.
        if self.cursor is not None and at <= self.cursor:
            raise malformed("describe_topic_partitions", f"next cursor {at} does not move past {self.cursor}")
        if self.pages >= self.max_pages:
            raise malformed(
                "describe_topic_partitions", f"still a next cursor after {self.pages} pages of {self.page_limit}"
            )
        self.cursor = at

    def descriptions(self) -> dict[str, TopicDescription]:
        """Every topic asked for, in the order asked; the first that failed or has no partitions raises."""
        if not self.done:
            raise ValueError("the paging is not done")
        out = {}
        for name in self.names:
            error = self._errors.get(name)
            if error is not None:
                raise missing_topic(name, error.code) if error.code in _MISSING else error
            partitions = self._partitions[name]
            if not partitions:
                raise missing_topic(name)
            out[name] = TopicDescription(name, self._ids.get(name), tuple(partitions[i] for i in sorted(partitions)))
        return out


# Errors that mean the topic is not there, worded as the Metadata path words them.
_MISSING = frozenset({ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.INVALID_TOPIC_EXCEPTION})
