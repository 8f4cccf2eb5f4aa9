"""InitProducerId: a producer id and epoch for an idempotent producer (Kafka's InitProducerId).

Without a transactional id any broker answers (Kafka does the same) with the
next id of this broker's block, epoch 0, also to a producer that names its
current id and epoch (KIP-360's reset of an idempotent producer): nothing
proves the id is the asker's, so a named id is never bumped, which would
fence the producer that holds it. With a transactional_id the request goes to this broker's
transaction coordinator (broker/txn/shell/coordinator_shell.py), which answers NOT_COORDINATOR
unless it owns the id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraftpy.protocol.validate import INT16_MAX, INT64_MAX, field, invalid

if TYPE_CHECKING:
    from kraftpy.broker.shell.replica_manager import ReplicaManager


class InitProducerIdHandler:
    def __init__(self, replica_manager: ReplicaManager) -> None:
        self.rm = replica_manager

    async def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        transactional_id = field(body, "transactional_id", str, nullable=True, default=None)
        producer_id = field(body, "producer_id", int, default=-1, min_value=-1, max_value=INT64_MAX)
        producer_epoch = field(body, "producer_epoch", int, default=-1, min_value=-1, max_value=INT16_MAX)
        if transactional_id is not None:
            return await self.rm.txn.init_producer_id(body)
        if (producer_id == -1) != (producer_epoch == -1):
            raise invalid("field 'producer_id' and 'producer_epoch' must both be -1 or both be set")
        timeout_ms = self.rm.settings.controller_request_timeout_ms
        return {"producer_id": await self.rm.producer_ids.generate(timeout_ms), "producer_epoch": 0}
