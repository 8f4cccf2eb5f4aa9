"""Reading and answering the broker's many-partition requests (docs/protocol.md, "Broker").

Every handler request that names partitions has the same shape,
`topics: [{name, partitions: [{partition, ...}]}]`, and every answer mirrors
it with a per-partition `error_code` (plus `error` and `message` when it is
not 0). `read_partitions` checks that shape and hands each partition map to
an API-specific reader; a bad field is INVALID_REQUEST naming its place
(`topics[0].partitions[2].fetch_offset`), so nothing half-parsed is acted on.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from kraftpy.broker.replication.leader import check_leader_epoch
from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX, field, invalid

T = TypeVar("T")

# Kafka's longest topic name.
MAX_TOPIC_NAME = 249
# Bounds on one request, so a single body cannot make the broker loop for long.
MAX_TOPICS_PER_REQUEST = 10_000
MAX_PARTITIONS_PER_REQUEST = 100_000


def at(where: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a field check, prefixing its INVALID_REQUEST message with the field's place."""
    try:
        return fn(*args, **kwargs)
    except KafkaError as exc:
        raise invalid(f"{where}: {exc.message}") from None


def read_partitions(body: Mapping[str, Any], read_one: Callable[[Mapping[str, Any]], T]) -> list[tuple[str, int, T]]:
    """(topic, partition, read_one(partition map)) for every partition of the request, in order.

    read_one raises KafkaError for a bad field; it is answered as INVALID_REQUEST prefixed with the
    partition's place, which is spelled out only then (this runs for every partition of every fetch).
    """
    topics = field(body, "topics", list, max_len=MAX_TOPICS_PER_REQUEST)
    out: list[tuple[str, int, T]] = []
    seen: set[tuple[str, int]] = set()
    for i, topic in enumerate(topics):
        where = f"topics[{i}]"
        if type(topic) is not dict and not isinstance(topic, Mapping):
            raise invalid(f"{where} must be a map, got {type(topic).__name__}")
        name = at(where, field, topic, "name", str, max_len=MAX_TOPIC_NAME)
        partitions = at(where, field, topic, "partitions", list, max_len=MAX_PARTITIONS_PER_REQUEST)
        for j, part in enumerate(partitions):
            if type(part) is not dict and not isinstance(part, Mapping):
                raise invalid(f"{where}.partitions[{j}] must be a map, got {type(part).__name__}")
            try:
                index = field(part, "partition", int, min_value=0, max_value=INT32_MAX)
                if (name, index) in seen:
                    raise invalid(f"partition {name}-{index} is listed twice")
                seen.add((name, index))
                out.append((name, index, read_one(part)))
            except KafkaError as exc:
                raise invalid(f"{where}.partitions[{j}]: {exc.message}") from None
        if len(out) > MAX_PARTITIONS_PER_REQUEST:
            raise invalid(f"more than {MAX_PARTITIONS_PER_REQUEST} partitions in one request")
    return out


def error_fields(error: ErrorCode | KafkaError, message: str = "") -> dict[str, Any]:
    """`error_code`, and for an error also `error`, `message` and any `details`."""
    if isinstance(error, KafkaError):
        out: dict[str, Any] = {"error_code": int(error.code), "error": error.code.name, "message": error.message}
        if error.details:
            out["details"] = dict(error.details)
        return out
    if error == ErrorCode.NONE:
        return {"error_code": 0}
    return {"error_code": int(error), "error": error.name, "message": message or error.name}


def group_by_topic(answers: Iterable[tuple[str, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """[{name, partitions: [{partition, ...}]}] in request order."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, partition, answer in answers:
        topics.setdefault(name, []).append({"partition": partition, **answer})
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]


def leading_partition(rm: Any, topic: str, partition: int, current_epoch: int) -> Any:
    """The hosted partition this broker leads at the client's epoch, or the KafkaError a client acts on
    (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, ...)."""
    hosted = rm.lookup(topic, partition)
    core = hosted.core
    if core.leader is None:
        error, _ = core.list_offsets_latest(current_epoch)
        raise KafkaError(f"broker {rm.broker_id} does not lead {topic}-{partition}", error)
    epoch_error = check_leader_epoch(current_epoch, core.leader_epoch)
    if epoch_error != ErrorCode.NONE:
        raise KafkaError(f"request epoch {current_epoch}, leader epoch {core.leader_epoch}", epoch_error)
    return hosted
