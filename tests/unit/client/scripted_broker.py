"""Kafka listeners with scripted answers, for client tests that need brokers to answer on cue (no tests here).

The listener and the dispatcher are the broker's own (protocol/kafka/shell/listener.py,
broker/kafka/shell/dispatcher.py), so every request and answer crosses the real codec and the
broker's real translation; only the handlers behind the Kafka APIs are scripted. `script` maps a
handler's name (`find_coordinator`, `describe_groups`, `list_offsets`, ...) to its answers in the
handlers' dict shape (docs/protocol.md's tables): each call takes the next one and the last one
repeats; a callable answer gets the request body, a KafkaError is raised (the API's error
response). Metadata is the dispatcher's own, from a real image that registers every broker of
the set at its listener.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

from kraftpy.broker.kafka.shell.dispatcher import BrokerApis
from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.metadata.controller.config import ControllerConfig
from kraftpy.metadata.controller.requests import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopic,
    CreateTopicsRequest,
)
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.image.metadata_image import MetadataImage
from kraftpy.metadata.records import Listener
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.kafka.limits import KafkaListenerLimits
from kraftpy.protocol.kafka.shell.listener import KafkaListener

CLUSTER_ID = "scripted-cluster"
Answer = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]] | KafkaError


class ScriptedBroker:
    """One broker: a Kafka listener whose handlers answer from `script`; `seen` lists (name, body) in order."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.script: dict[str, list[Answer]] = {}
        self.seen: list[tuple[str, dict[str, Any]]] = []
        self.image = MetadataImage.EMPTY
        # What the dispatcher reads of its broker (broker/shell/server.py's BrokerComponent).
        self.node = SimpleNamespace(
            config=SimpleNamespace(node_id=node_id, auto_create_topics_enable=False), cluster_id=CLUSTER_ID
        )
        self.replica_manager = self
        self.metadata = self
        # Forwarded admin requests, scripted under their controller path ("/controller/create_topics").
        self.controller_channel = SimpleNamespace(forward=lambda path, body, timeout_ms: self.answer(path, body))
        self.settings = ReplicaManagerSettings()
        self.listener = KafkaListener("PLAINTEXT", "127.0.0.1", 0, BrokerApis(self), KafkaListenerLimits())

    @property
    def port(self) -> int:
        return self.listener.port

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def calls(self, name: str) -> list[dict[str, Any]]:
        return [body for seen, body in self.seen if seen == name]

    def handlers(self) -> _Handlers:
        return _Handlers(self)

    async def answer(self, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self.seen.append((name, body))
        answers = self.script.get(name)
        if not answers:
            raise KafkaError(f"{name} is not scripted on node {self.node_id}", ErrorCode.INVALID_REQUEST)
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, KafkaError):
            raise answer
        return answer(body) if callable(answer) else dict(answer)


class _Handlers:
    """ReplicaManager.handlers() of a scripted broker: every name is served, from the script."""

    def __init__(self, broker: ScriptedBroker) -> None:
        self.broker = broker

    def __getitem__(self, name: str) -> Callable[[dict[str, Any]], Any]:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            return await self.broker.answer(name, body)

        return handle


def registered(brokers: list[ScriptedBroker], topics: dict[str, int]) -> MetadataImage:
    """An image in which every broker is registered (unfenced) at its Kafka listener and `topics` (name ->
    partitions) exist, made by the real controller: the broker's translation checks topics as Kafka's does."""
    harness = ControllerHarness(ControllerConfig(cluster_id=CLUSTER_ID))
    for b in brokers:
        listeners = (Listener("PLAINTEXT", "127.0.0.1", b.port),)
        request = BrokerRegistrationRequest(b.node_id, CLUSTER_ID, f"incarnation-{b.node_id}", listeners)
        response = harness.send(request).response
        assert isinstance(response, BrokerRegistrationResponse), response
        harness.broker_epochs[b.node_id] = response.broker_epoch
    harness.commit()
    for b in brokers:
        harness.heartbeat(b.node_id)
    harness.commit()
    if topics:
        harness.send(CreateTopicsRequest(tuple(CreatableTopic(t, n, 1, None, {}) for t, n in topics.items())))
        harness.commit()
    return harness.committed


@asynccontextmanager
async def scripted_brokers(*node_ids: int, topics: dict[str, int] | None = None) -> AsyncIterator[list[ScriptedBroker]]:
    brokers = [ScriptedBroker(n) for n in node_ids]
    try:
        for b in brokers:
            await b.listener.start()
        image = registered(brokers, topics or {})
        for b in brokers:
            b.image = image
        yield brokers
    finally:
        for b in brokers:
            await b.listener.stop()
