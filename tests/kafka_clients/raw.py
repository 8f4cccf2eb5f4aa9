"""A blocking Kafka connection framed by hand through kraftpy's codec, for tests that speak the wire.

Tests use it for requests no client library sends that way (old versions, hostile items, one
chosen broker) and to read what a broker itself says (its own Metadata view).
"""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest
from kafka.protocol.metadata.metadata import MetadataRequest

from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_request
from tests.integration.test_cluster_support import LocalCluster, wait_for

TIMEOUT_S = 30
_correlation = itertools.count(1)


class Raw:
    """One Kafka connection: requests sent, answers read in order."""

    def __init__(self, address: str, timeout_s: float = TIMEOUT_S) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, api_key: int, version: int, request: Any) -> RequestHeader:
        header = RequestHeader(api_key, version, next(_correlation), "raw-test")
        self.sock.sendall(encode_request(header, request))
        return header

    def read(self, header: RequestHeader) -> Any:
        (size,) = struct.unpack(">i", self._exactly(4))
        correlation_id, body = decode_response(header, self._exactly(size))
        assert correlation_id == header.correlation_id
        return body

    def call(self, api_key: int, version: int, request: Any) -> Any:
        return self.read(self.send(api_key, version, request))

    def closed_by_peer(self) -> bool:
        return self.sock.recv(1) == b""

    def _exactly(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return out


def call(cluster: LocalCluster, node_id: int, api_key: int, version: int, request: Any) -> Any:
    """One request to broker `node_id`'s Kafka listener; its decoded response."""
    with Raw(cluster.bootstrap_servers.split(",")[node_id - 1]) as raw:
        return raw.call(api_key, version, request)


def coordinator(bootstrap_servers: str, key: str, key_type: int = 0, timeout_s: float = TIMEOUT_S) -> Any:
    """The first broker's FindCoordinator (v3) answer for a group (key_type 0) or a transactional id
    (1), asked again until it names a coordinator (the internal topic may still be getting leaders)."""

    def found() -> Any:
        with Raw(bootstrap_servers.split(",")[0]) as raw:
            answer = raw.call(10, 3, FindCoordinatorRequest(key=key, key_type=key_type, version=3))
        return answer if answer.error_code == 0 else None

    return wait_for(f"the coordinator of {key}", found, timeout_s=timeout_s)


def wait_until_every_broker_leads(
    bootstrap_servers: str, topic: str, partitions: int, *, isr_size: int | None = None, timeout_s: float = TIMEOUT_S
) -> None:
    """Wait until each broker's own Metadata lists `topic` with a leader for every partition (and, with
    `isr_size`, that many replicas in each ISR); `timeout_s` for each broker.

    A created topic reaches the brokers through the metadata log, a little later on some than on
    others (as in Kafka). A consumer group leader that assigns from a broker's view without the topic
    assigns nothing, and a load started before then measures clients waiting for leaders.
    """
    request = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic, topic_id=None)])

    def led_on(address: str) -> bool:
        with Raw(address) as raw:
            (answer,) = raw.call(3, 12, request).topics
        led = [p for p in answer.partitions if p.leader_id >= 0 and (isr_size is None or len(p.isr_nodes) == isr_size)]
        return answer.error_code == 0 and len(led) == partitions

    for address in bootstrap_servers.split(","):
        wait_for(f"{topic} led on {address}", lambda a=address: led_on(a), timeout_s=timeout_s)
