"""`kraftpy topics delete|alter` refuse Kafka's internal topics before contacting any server (TopicCommand's guard)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kraftpy.protocol.topics import INTERNAL_TOPICS, OFFSETS_TOPIC, is_internal
from kraftpy.tools.commands.topics import alter, delete


@pytest.mark.parametrize("topic", sorted(INTERNAL_TOPICS))
def test_delete_of_an_internal_topic_is_refused_with_its_code(topic: str, closed_port: str) -> None:
    result = CliRunner().invoke(delete, [topic, "--bootstrap-server", closed_port, "--timeout-ms", "500"])
    assert result.exit_code == 1
    assert "INVALID_TOPIC_EXCEPTION" in result.output
    assert f"topic {topic} is a Kafka internal topic" in result.output


def test_partition_count_of_the_offsets_topic_cannot_change(closed_port: str) -> None:
    args = [OFFSETS_TOPIC, "--partitions", "60", "--bootstrap-server", closed_port, "--timeout-ms", "500"]
    result = CliRunner().invoke(alter, args)
    assert result.exit_code == 1
    assert "INVALID_TOPIC_EXCEPTION" in result.output and "partition count" in result.output


def test_an_ordinary_topic_goes_to_the_cluster(closed_port: str) -> None:
    # Not refused up front: the command tries the (closed) server and fails there instead.
    result = CliRunner().invoke(delete, ["orders", "--bootstrap-server", closed_port, "--timeout-ms", "500"])
    assert result.exit_code == 1
    assert "INVALID_TOPIC_EXCEPTION" not in result.output
    assert not is_internal("orders") and is_internal(OFFSETS_TOPIC)
