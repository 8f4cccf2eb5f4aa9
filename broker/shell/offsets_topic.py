"""`__consumer_offsets` (and `__transaction_state`): how an internal topic is created on first use.

The first FindCoordinator for a group asks the active controller to create the topic (Kafka's
AutoTopicCreationManager for internal topics): `offsets_topic_num_partitions` partitions, replication
factor min(`offsets_topic_replication_factor`, live brokers), compacted, `offsets_topic_segment_bytes`
segments. One creation at a time per broker; brokers racing each other get TOPIC_ALREADY_EXISTS,
which counts as success. The caller answers COORDINATOR_NOT_AVAILABLE meanwhile and the client retries,
by which time the topic is in this broker's metadata image.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from kraftpy.broker.groups.shell.settings import GroupShellSettings
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.topics import OFFSETS_TOPIC

log = logging.getLogger(__name__)

CREATE_TOPICS_PATH = "/controller/create_topics"


def internal_topic_request(
    image: MetadataImage,
    name: str,
    num_partitions: int,
    replication_factor: int,
    configs: dict[str, str],
) -> dict[str, Any]:
    """The CreateTopics body of a compacted internal topic; the replication factor capped by live brokers."""
    live = len(image.cluster.usable_brokers())
    topic = {
        "name": name,
        "num_partitions": num_partitions,
        "replication_factor": max(1, min(replication_factor, live)),
        "configs": {"cleanup_policy": "compact", **configs},
    }
    return {"topics": [topic], "validate_only": False}


def creation_request(image: MetadataImage, settings: GroupShellSettings) -> dict[str, Any]:
    """The CreateTopics body for __consumer_offsets as the cluster looks now (docs/protocol.md)."""
    return internal_topic_request(
        image,
        OFFSETS_TOPIC,
        settings.coordinator.offsets_topic_num_partitions,
        settings.offsets_topic_replication_factor,
        {"segment_bytes": str(settings.offsets_topic_segment_bytes)},
    )


class InternalTopicCreator:
    """Creates one internal topic through the active controller, one attempt in flight at a time."""

    def __init__(
        self,
        controller_call: Callable[[str, dict[str, Any]], Any],
        image_provider: Callable[[], MetadataImage],
        name: str,
        request: Callable[[MetadataImage], dict[str, Any]],
    ) -> None:
        self._call = controller_call
        self._image = image_provider
        self.name = name
        self._request = request
        self._task: asyncio.Task[None] | None = None
        self.attempts = 0

    def ensure_created(self) -> None:
        """Start a creation unless one is running or the topic exists; never waits."""
        if self._task is not None and not self._task.done():
            return
        if self._image().topic(self.name) is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._create(), name=f"kraftpy-create-{self.name}")

    async def _create(self) -> None:
        self.attempts += 1
        body = self._request(self._image())
        try:
            answer = await self._call(CREATE_TOPICS_PATH, body)
        except KafkaError as exc:
            log.warning("creating %s failed: %s (the next FindCoordinator tries again)", self.name, exc)
            return
        for result in answer.get("topics") or []:
            code = result.get("error_code", 0) if isinstance(result, dict) else 0
            if code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.info("%s created (or already there): %s", self.name, body["topics"][0])
            else:
                log.warning("creating %s failed: %s", self.name, result)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class OffsetsTopicCreator(InternalTopicCreator):
    """Creates __consumer_offsets (its settings: the group coordinator's)."""

    def __init__(
        self,
        controller_call: Callable[[str, dict[str, Any]], Any],
        image_provider: Callable[[], MetadataImage],
        settings: GroupShellSettings,
    ) -> None:
        super().__init__(
            controller_call, image_provider, OFFSETS_TOPIC, lambda image: creation_request(image, settings)
        )
