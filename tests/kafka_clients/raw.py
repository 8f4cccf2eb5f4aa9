"""A blocking Kafka connection framed by hand through kraftpy's codec, for tests that speak the wire.

Tests use it for requests no client library sends that way (old versions, hostile items, one
chosen broker) and to read what a broker itself says (its own Metadata view).
"""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from kraftpy.protocol.kafka.codec import RequestHeader, decode_response, encode_request
from tests.integration.test_cluster_support import LocalCluster

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
