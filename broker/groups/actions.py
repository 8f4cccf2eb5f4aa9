"""What the group coordinator asks its shell to do.

Design notes: docs/groups.md, section "broker/groups/actions.py".
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from kraftpy.broker.groups.records import Record


@dataclass(frozen=True, slots=True)
class Respond:
    request_id: Hashable
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Append:
    append_id: int
    partition: int
    records: tuple[Record, ...]
    # Why the records are written: "offset_commit", "group_metadata" or "cleanup" (for logs and metrics).
    kind: str
    # A transactional batch of this producer (TxnOffsetCommit), or -1: a plain one.
    producer_id: int = -1
    producer_epoch: int = -1


Action = Respond | Append
