"""An admin call whose broker could not reach the controller (an election) is retried, as Kafka's AdminClient does.

The broker is a real Kafka listener and dispatcher with the controller's answers scripted
(scripted_broker.py): the first forwarded CreateTopics meets NOT_CONTROLLER, which the broker answers
on every topic of the request; the AdminClient must ask again and get the topic, not report the error.
"""

from __future__ import annotations

import pytest

from kraftpy.client.admin.types import NewTopic
from kraftpy.client.errors import KafkaTimeoutError
from kraftpy.client.shell.admin import AdminClient
from kraftpy.protocol.errors import ErrorCode, KafkaError
from tests.unit.client.scripted_broker import scripted_brokers

CREATED = {"error_code": 0, "topics": [{"name": "t", "error_code": 0, "num_partitions": 2, "replication_factor": 1}]}


async def test_a_create_topics_that_meets_an_election_is_retried() -> None:
    async with scripted_brokers(1) as (broker,):
        broker.script["/controller/create_topics"] = [
            KafkaError("the active controller is not known yet", ErrorCode.NOT_CONTROLLER),
            CREATED,
        ]
        broker.script["/controller/describe_configs"] = [{"error_code": 0, "results": []}]
        client = AdminClient([broker.address], default_api_timeout_ms=10_000, retry_backoff_ms=10)
        async with client as admin:
            results = await admin.create_topics([NewTopic("t", 2, 1)])
    assert results["t"].error is None, results
    assert len(broker.calls("/controller/create_topics")) == 2


async def test_not_controller_until_the_timeout_is_a_timeout_naming_it() -> None:
    async with scripted_brokers(1) as (broker,):
        broker.script["/controller/create_topics"] = [KafkaError("electing", ErrorCode.NOT_CONTROLLER)]
        client = AdminClient([broker.address], default_api_timeout_ms=1_000, retry_backoff_ms=10)
        async with client as admin:
            with pytest.raises(KafkaTimeoutError) as info:  # not a result carrying the error
                await admin.create_topics([NewTopic("t", 2, 1)])
    assert "NOT_CONTROLLER" in str(info.value), info.value
    assert len(broker.calls("/controller/create_topics")) > 1
