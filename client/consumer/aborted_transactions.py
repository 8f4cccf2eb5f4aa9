"""A read_committed consumer's filter of aborted transactions (sans-I/O), as Kafka's CompletedFetch.

A read_committed Fetch answer lists, per partition, the aborted transactions
that overlap the data returned: (producer id, first offset). Walking the
batches in offset order, a producer becomes "aborted" once a batch reaches
the first offset of one of its aborted transactions, and stops being so at
its ABORT marker; its transactional batches in between are dropped. Control
batches (the markers) are never returned; the consumer's position steps over
both. Docs: docs/transactions.md, section "The client".
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from kraftpy.protocol.records.control import read_marker
from kraftpy.protocol.records.header import BatchHeader

NO_PRODUCER_ID = -1


class AbortedTransactionFilter:
    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        """`aborted`: (producer_id, first_offset) pairs, in any order (Kafka keeps them in a priority queue)."""
        self._pending = [(first_offset, producer_id) for producer_id, first_offset in aborted]
        heapq.heapify(self._pending)
        self._aborted_producers: set[int] = set()

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            _, producer_id = heapq.heappop(self._pending)
            self._aborted_producers.add(producer_id)

    def skip(self, header: BatchHeader, buf: bytes, pos: int) -> bool:
        """Feed the batch at `pos` (in offset order); True when it belongs to an aborted transaction.

        Control batches are never "skipped" here (the caller drops them anyway), but an ABORT marker ends
        its producer's aborted range. Raises CorruptRecordError for a marker that cannot be read.
        """
        if header.producer_id == NO_PRODUCER_ID:
            return False
        self._consume_up_to(header.last_offset)
        if header.is_control:
            marker = read_marker(buf, header, pos)
            if marker is not None and not marker.committed:
                self._aborted_producers.discard(header.producer_id)
            return False
        return header.is_transactional and header.producer_id in self._aborted_producers
