"""The `quorum-state` file: the core's durable election state (epoch, voted-for, leader), as KRaft keeps it.

JSON with KRaft's field names (`leaderId`, `leaderEpoch`, `votedId`, -1 for
none) plus the cluster id and a CRC32C over the canonical encoding of the other
fields, so a torn or hand-edited file is caught instead of silently resetting
a vote (two votes in one epoch would break election safety).

Written atomically: a temp file is written and fsynced, renamed over the old
one, and the directory is fsynced, before `write` returns. A crash leaves the
old or the new state, never a mix. A missing file means "never voted"; a
corrupt one, or one of another cluster, is a refusal to start with a message
that says what to do.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import crc32c

from kraftpy.protocol.errors import ErrorCode, KafkaError
from kraftpy.protocol.validate import INT32_MAX
from kraftpy.raft.quorum_state import QuorumState
from kraftpy.storage.files import fsync_dir, write_all

FILE_NAME = "quorum-state"
DATA_VERSION = 0


class QuorumStateFileError(KafkaError):
    code = ErrorCode.KAFKA_STORAGE_ERROR


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode(state: QuorumState, cluster_id: str) -> bytes:
    _check_widths(state)
    body: dict[str, Any] = {
        "clusterId": cluster_id,
        "leaderId": -1 if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": -1 if state.voted_for is None else state.voted_for,
        "data_version": DATA_VERSION,
    }
    body["crc"] = crc32c.crc32c(_canonical(body))
    return json.dumps(body, sort_keys=True).encode() + b"\n"


def _check_widths(state: QuorumState) -> None:
    """KRaft's quorum-state holds int32s: a value outside that is refused before it is written,
    so the file never holds a state the node could not act on after a restart."""
    for name, value in (("epoch", state.epoch), ("voted_for", state.voted_for), ("leader_id", state.leader_id)):
        if value is not None and not 0 <= value <= INT32_MAX:
            raise QuorumStateFileError(f"refusing to persist {name} = {value}: outside [0, {INT32_MAX}]")


def decode(data: bytes, path: Path, cluster_id: str) -> QuorumState:
    advice = (
        "it holds this node's vote; do not delete it while the node is a voter of a live quorum "
        "(restore it from a backup or reformat the node)"
    )
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise QuorumStateFileError(f"{path} is not valid JSON ({exc}); {advice}") from None
    if not isinstance(body, dict):
        raise QuorumStateFileError(f"{path} is not a JSON object; {advice}")
    crc = body.pop("crc", None)
    if crc != crc32c.crc32c(_canonical(body)):
        raise QuorumStateFileError(f"{path} fails its CRC check (torn write or edited by hand); {advice}")
    fields = ("clusterId", "leaderId", "leaderEpoch", "votedId", "data_version")
    if set(body) != set(fields):
        raise QuorumStateFileError(f"{path} must hold exactly {', '.join(fields)} and crc; {advice}")
    for name in ("leaderId", "leaderEpoch", "votedId", "data_version"):
        value = body[name]
        low = 0 if name == "leaderEpoch" else -1
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= INT32_MAX:
            raise QuorumStateFileError(f"{path}: {name} = {value!r} is not a valid value; {advice}")
    if body["data_version"] != DATA_VERSION:
        raise QuorumStateFileError(f"{path}: unknown data_version {body['data_version']}")
    if body["clusterId"] != cluster_id:
        raise KafkaError(
            f"{path} belongs to cluster {body['clusterId']!r}, not {cluster_id!r}",
            ErrorCode.INCONSISTENT_CLUSTER_ID,
        )
    leader = body["leaderId"]
    voted = body["votedId"]
    return QuorumState(body["leaderEpoch"], None if voted < 0 else voted, None if leader < 0 else leader)


def read(directory: Path, cluster_id: str) -> QuorumState | None:
    """The stored state, or None when the file does not exist (a node that never voted)."""
    path = Path(directory) / FILE_NAME
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data, path, cluster_id)


def write(directory: Path, state: QuorumState, cluster_id: str) -> None:
    """Replace the file atomically and durably (temp, fsync, rename, fsync dir)."""
    directory = Path(directory)
    path = directory / FILE_NAME
    tmp = directory / (FILE_NAME + ".tmp")
    data = encode(state, cluster_id)  # refuses a value outside int32 before anything is touched
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(directory)
