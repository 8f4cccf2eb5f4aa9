"""Types every package shares: a partition's name, a network address and its one parser."""

from __future__ import annotations

from typing import Any, NamedTuple

Address = tuple[str, int]  # (host, port)


def format_address(host: str, port: int) -> str:
    """'host:port', an IPv6 host in brackets (as in a URL or a Host header); parse_address reads it back."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def parse_address(text: Any) -> Address | None:
    """'host:port' or '[v6host]:port' -> (host, port) without brackets; None for anything else."""
    if not isinstance(text, str):
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


class TopicPartition(NamedTuple):
    """A partition of a topic; hashable and ordered so it can key maps and sort output."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


def as_topic_partition(value: TopicPartition | tuple[str, int]) -> TopicPartition:
    """Accept a TopicPartition or a (topic, partition) pair, checking the types."""
    if isinstance(value, TopicPartition):
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int):
        return TopicPartition(value[0], value[1])
    raise TypeError(f"expected a TopicPartition or a (topic, partition) pair, got {value!r}")
