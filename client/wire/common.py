"""What the API translators share: message classes by API key, error fields, leader hints.

The client's cores read answers in the shapes docs/handlers.md lists
(`error_code`, `message`, `details`, partitions as `partition`); each
translator turns a Kafka response into that shape at this one seam, and a
request body into Kafka's message, so the cores' decisions stay as they are.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from kraftpy.protocol.errors import ErrorCode
from kraftpy.protocol.kafka.codec import message_classes
from kraftpy.protocol.types import format_address

ZERO_UUID = uuid.UUID(int=0)


def request_class(api_key: int) -> Any:
    return message_classes(api_key)[0]


def error_fields(code: int | None, message: str | None = None) -> dict[str, Any]:
    """`error_code` and, for an error, `message` (Kafka's error_message, else the code's name)."""
    code = int(code or 0)
    if code == 0:
        return {"error_code": 0}
    if not message:
        try:
            message = ErrorCode(code).name
        except ValueError:
            message = f"error code {code}"
    return {"error_code": code, "message": message}


def endpoints(nodes: Iterable[Any] | None) -> dict[int, str]:
    """Kafka's node_endpoints (KIP-951) as {node_id: "host:port"}."""
    return {int(n.node_id): format_address(n.host, int(n.port)) for n in nodes or ()}


def leader_details(current_leader: Any, known: Mapping[int, str]) -> dict[str, Any]:
    """A partition's current_leader as the `details` of a NOT_LEADER_OR_FOLLOWER answer (leader hint)."""
    leader_id = getattr(current_leader, "leader_id", -1) if current_leader is not None else -1
    if leader_id is None or leader_id < 0:
        return {}
    details: dict[str, Any] = {"leader_id": int(leader_id), "leader_epoch": int(current_leader.leader_epoch)}
    if leader_id in known:
        details["leader_address"] = known[leader_id]
    return details


def topic_id_text(topic_id: Any) -> str | None:
    """A topic id as the client keeps it: UUID text, None for Kafka's zero UUID."""
    if topic_id is None or topic_id == ZERO_UUID:
        return None
    return str(topic_id)
