"""`__consumer_offsets`: how it is created on first use (its name is in kraftpy.protocol.topics).

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


def creation_request(image: MetadataImage, settings: GroupShellSettings) -> dict[str, Any]:
    """The CreateTopics body for __consumer_offsets as the cluster looks now (docs/protocol.md)."""
    live = len(image.cluster.usable_brokers())
    replication_factor = max(1, min(settings.offsets_topic_replication_factor, live))
    topic = {
        "name": OFFSETS_TOPIC,
        "num_partitions": settings.coordinator.offsets_topic_num_partitions,
        "replication_factor": replication_factor,
        "configs": {"cleanup_policy": "compact", "segment_bytes": str(settings.offsets_topic_segment_bytes)},
    }
    return {"topics": [topic], "validate_only": False}


class OffsetsTopicCreator:
    """Creates __consumer_offsets through the active controller, one attempt in flight at a time."""

    def __init__(
        self,
        controller_call: Callable[[str, dict[str, Any]], Any],
        image_provider: Callable[[], MetadataImage],
        settings: GroupShellSettings,
    ) -> None:
        self._call = controller_call
        self._image = image_provider
        self._settings = settings
        self._task: asyncio.Task[None] | None = None
        self.attempts = 0

    def ensure_created(self) -> None:
        """Start a creation unless one is running or the topic exists; never waits."""
        if self._task is not None and not self._task.done():
            return
        if self._image().topic(OFFSETS_TOPIC) is not None:
            return
        self._task = asyncio.get_running_loop().create_task(self._create(), name="kraftpy-create-offsets-topic")

    async def _create(self) -> None:
        self.attempts += 1
        body = creation_request(self._image(), self._settings)
        try:
            answer = await self._call(CREATE_TOPICS_PATH, body)
        except KafkaError as exc:
            log.warning("creating %s failed: %s (the next FindCoordinator tries again)", OFFSETS_TOPIC, exc)
            return
        for result in answer.get("topics") or []:
            code = result.get("error_code", 0) if isinstance(result, dict) else 0
            if code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                log.info("%s created (or already there): %s", OFFSETS_TOPIC, body["topics"][0])
            else:
                log.warning("creating %s failed: %s", OFFSETS_TOPIC, result)

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
