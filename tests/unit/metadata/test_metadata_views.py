"""JSON-ready views of the image for the CLI."""

from __future__ import annotations

import json

from kraftpy.metadata.controller.requests import CreatableTopic, CreateTopicsRequest
from kraftpy.metadata.harness import ControllerHarness
from kraftpy.metadata.image.views import broker_descriptions, topic_description, topic_names


def test_views_are_json_ready() -> None:
    h = ControllerHarness()
    h.start_brokers([0, 1], racks={0: "r1"})
    h.send(CreateTopicsRequest((CreatableTopic("b", 2, 2, configs={"retention.ms": 5}), CreatableTopic("a"))))
    assert topic_names(h.committed) == ["a", "b"]
    described = topic_description(h.committed, "b")
    assert json.loads(json.dumps(described)) == described
    assert described["topic_id"] == str(h.committed.topic("b").topic_id)
    assert [p["partition"] for p in described["partitions"]] == [0, 1]
    assert all(p["leader"] == p["replicas"][0] and p["leader_epoch"] == 0 for p in described["partitions"])
    assert all(p["elr"] == [] and p["last_known_elr"] == [] for p in described["partitions"])
    assert described["configs"] == {"retention_ms": 5}
    assert topic_description(h.committed, "nope") is None
    brokers = broker_descriptions(h.committed)
    assert [(b["node_id"], b["fenced"], b["rack"]) for b in brokers] == [(0, False, "r1"), (1, False, None)]
    assert brokers[0]["listeners"] == [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}]
