"""acks=all produces waiting for the high watermark: Kafka's DelayedProduce, for one partition.

Design notes: docs/replication.md, section "broker/replication/delayed_produce.py".
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from kraftpy.broker.replication.actions import CompleteProduce
from kraftpy.protocol.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class PendingProduce:
    request_id: Hashable
    base_offset: int
    last_offset: int
    deadline_ms: int
    log_append_time_ms: int = -1


class DelayedProduces:
    def __init__(self) -> None:
        self._pending: dict[Hashable, PendingProduce] = {}

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._pending

    def add(
        self,
        request_id: Hashable,
        base_offset: int,
        last_offset: int,
        timeout_ms: int,
        now_ms: int,
        log_append_time_ms: int = -1,
    ) -> None:
        if request_id in self._pending:
            raise ValueError(f"produce {request_id!r} is already waiting")
        deadline_ms = now_ms + max(0, timeout_ms)
        self._pending[request_id] = PendingProduce(
            request_id, base_offset, last_offset, deadline_ms, log_append_time_ms
        )

    def try_complete(self, high_watermark: int, maximal_isr_size: int, min_isr: int) -> list[CompleteProduce]:
        """Kafka's checkEnoughReplicasReachOffset for every waiting produce; `min_isr` is the effective one."""
        done: list[CompleteProduce] = []
        for request_id, pending in list(self._pending.items()):
            if high_watermark > pending.last_offset:
                del self._pending[request_id]
                if maximal_isr_size >= min_isr:
                    done.append(
                        CompleteProduce(
                            request_id,
                            ErrorCode.NONE,
                            pending.base_offset,
                            pending.last_offset,
                            log_append_time_ms=pending.log_append_time_ms,
                        )
                    )
                else:
                    done.append(
                        CompleteProduce(
                            request_id,
                            ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                            pending.base_offset,
                            pending.last_offset,
                            message=f"the batch is committed but the ISR has {maximal_isr_size} members, "
                            f"fewer than the effective min ISR {min_isr}",
                            log_append_time_ms=pending.log_append_time_ms,
                        )
                    )
        return done

    def expire(self, now_ms: int) -> list[CompleteProduce]:
        done: list[CompleteProduce] = []
        for request_id, pending in list(self._pending.items()):
            if now_ms >= pending.deadline_ms:
                del self._pending[request_id]
                done.append(
                    CompleteProduce(
                        request_id,
                        ErrorCode.REQUEST_TIMED_OUT,
                        pending.base_offset,
                        pending.last_offset,
                        message="the high watermark did not reach the batch in time; "
                        "the batch is in the leader's log and may still be committed",
                        log_append_time_ms=pending.log_append_time_ms,
                    )
                )
        return done

    def fail_all(self, error: ErrorCode, message: str) -> list[CompleteProduce]:
        done = [
            CompleteProduce(p.request_id, error, p.base_offset, p.last_offset, message=message)
            for p in self._pending.values()
        ]
        self._pending.clear()
        return done
