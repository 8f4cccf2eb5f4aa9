"""Clients: Producer, Consumer and AdminClient (asyncio first, with sync wrappers).

    from kraftpy.client import Producer, Consumer, AdminClient, TopicPartition
    from kraftpy.client import SyncProducer, SyncConsumer, SyncAdminClient

Names are imported on first use, so `import kraftpy.client.producer.partitioner` (or
the CLI) does not pay for aiohttp and the whole client.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Producer": "kraftpy.client.shell.producer",
    "Consumer": "kraftpy.client.shell.consumer",
    "AdminClient": "kraftpy.client.shell.admin",
    "SyncProducer": "kraftpy.client.shell.sync",
    "SyncConsumer": "kraftpy.client.shell.sync",
    "SyncAdminClient": "kraftpy.client.shell.sync",
    "TopicPartition": "kraftpy.client.types",
    "RecordMetadata": "kraftpy.client.types",
    "ConsumerRecord": "kraftpy.client.types",
    "ProducerRecord": "kraftpy.client.types",
    "OffsetAndTimestamp": "kraftpy.client.types",
    "OffsetAndMetadata": "kraftpy.client.group.commits",
    "ConsumerRebalanceListener": "kraftpy.client.rebalance_listener",
    "CommitFailedError": "kraftpy.client.group.errors",
    "RebalanceInProgressError": "kraftpy.client.group.errors",
    "NewTopic": "kraftpy.client.admin.types",
    "ConfigResource": "kraftpy.client.admin.types",
    "AlterConfigOp": "kraftpy.client.admin.types",
    "LogTruncationError": "kraftpy.client.errors",
    "RecordDeserializationError": "kraftpy.client.errors",
    "ConfigError": "kraftpy.client.errors",
    "KafkaTimeoutError": "kraftpy.client.errors",
    "BufferExhaustedError": "kraftpy.client.errors",
    "RecordTooLargeError": "kraftpy.client.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kraftpy.client' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
