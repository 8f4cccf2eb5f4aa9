"""The transaction APIs on the Kafka listener, served by the transaction coordinator's handlers.

Each handler translates with broker/kafka/transactions.py and calls the coordinator's handler
(`add_partitions_to_txn`, ...), so validation and semantics live in the coordinator.
InitProducerId and FindCoordinator (key_type 1) are served by the data and group families.
Notes: docs/kafka-listener.md, "Transaction APIs".
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kraftpy.broker.kafka import transactions as tx
from kraftpy.broker.kafka.shell.api_handler import ApiHandler, through_handler
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.kafka.shell.listener import RequestContext

if TYPE_CHECKING:
    from kraftpy.broker.kafka.shell.dispatcher import BrokerApis

ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
TXN_OFFSET_COMMIT = 28
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66


async def handle_add_partitions(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    image = apis.image()
    results = []
    for ask in tx.add_partitions_asks(request, version):
        known, unknown = tx.split_unknown(image, ask.topics)
        if unknown:
            results.append((ask.transactional_id, tx.partition_codes(ask, unknown, 0)))
            continue
        try:
            if ask.verify_only:
                answer = await apis.handler("verify_txn_partitions")(ask.body(known))
                codes = {(r["name"], r["partition_index"]): r["error_code"] for r in answer.get("results") or []}
            else:
                answer = await apis.handler("add_partitions_to_txn")(ask.body(known))
                codes = tx.partition_codes(ask, set(), int(answer.get("error_code", 0)))
        except KafkaError as exc:  # one transaction's bad fields cost that transaction only
            codes = tx.partition_codes(ask, set(), int(exc.code))
        results.append((ask.transactional_id, codes))
    return tx.add_partitions_response(version, results)


async def handle_describe_transactions(apis: BrokerApis, ctx: RequestContext, request: Any) -> Any:
    ids = list(request.transactional_ids or [])
    answer = await apis.handler("describe_transactions")({"transactional_ids": ids}) if ids else {}
    return tx.describe_transactions_response(ctx.header.api_version, list(answer.get("transaction_states") or []))


HANDLERS = {
    ADD_PARTITIONS_TO_TXN: ApiHandler(handle_add_partitions, tx.add_partitions_error),
    ADD_OFFSETS_TO_TXN: ApiHandler(
        through_handler("add_offsets_to_txn", tx.add_offsets_body, tx.add_offsets_response), tx.add_offsets_error
    ),
    END_TXN: ApiHandler(through_handler("end_txn", tx.end_txn_body, tx.end_txn_response), tx.end_txn_error),
    TXN_OFFSET_COMMIT: ApiHandler(
        through_handler("txn_offset_commit", tx.txn_offset_commit_body, tx.txn_offset_commit_response),
        tx.txn_offset_commit_error,
    ),
    DESCRIBE_TRANSACTIONS: ApiHandler(handle_describe_transactions, tx.describe_transactions_error),
    LIST_TRANSACTIONS: ApiHandler(
        through_handler("list_transactions", tx.list_transactions_body, tx.list_transactions_response),
        tx.list_transactions_error,
    ),
}
