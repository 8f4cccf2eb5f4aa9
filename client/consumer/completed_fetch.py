"""One partition's share of a fetch answer, turned into ConsumerRecords a poll at a time.

Design notes: docs/client.md, section "client/consumer/completed_fetch.py".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kraftpy.client.consumer.aborted_transactions import AbortedTransactionFilter
from kraftpy.client.consumer.batch_decoder import FastBatch, decode_for_consumer
from kraftpy.client.errors import CorruptFetchError, RecordDeserializationError
from kraftpy.client.types import ConsumerRecord
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode, KafkaError
from kraftpy.protocol.records.batch import DecodedBatch
from kraftpy.protocol.records.header import LOG_OVERHEAD, crc_matches, parse_header, peek_size
from kraftpy.protocol.types import TopicPartition

Deserializer = Callable[[bytes | None], Any]


def _identity(data: bytes | None) -> Any:
    return data


class CompletedFetch:
    def __init__(
        self,
        tp: TopicPartition,
        fetch_offset: int,
        records: bytes,
        *,
        error_code: ErrorCode = ErrorCode.NONE,
        error_message: str = "",
        high_watermark: int = -1,
        log_start_offset: int = -1,
        diverging_epoch: tuple[int, int] | None = None,
        key_deserializer: Deserializer = _identity,
        value_deserializer: Deserializer = _identity,
        max_partition_fetch_bytes: int = 1_048_576,
        check_crcs: bool = True,
        aborted_transactions: AbortedTransactionFilter | None = None,
    ) -> None:
        self.tp = tp
        self.fetch_offset = fetch_offset
        self.error_code = error_code
        self.error_message = error_message
        self.high_watermark = high_watermark
        self.log_start_offset = log_start_offset
        self.diverging_epoch = diverging_epoch  # (epoch, end_offset) when the leader says our log diverged
        self.next_fetch_offset = fetch_offset
        self.last_epoch: int | None = None
        self.initialized = False
        self.consumed = False
        self._buf = records
        self._check_crcs = check_crcs
        self._pos = 0
        self._batch: DecodedBatch | FastBatch | None = None
        self._index = 0
        self._decoded_any = False
        self._error: KafkaError | None = None
        self._key_de = key_deserializer
        self._value_de = value_deserializer
        self._max_partition_fetch_bytes = max_partition_fetch_bytes
        self._aborted = aborted_transactions  # read_committed only

    @property
    def size_in_bytes(self) -> int:
        return len(self._buf)

    def estimated_remaining_records(self) -> int:
        """Records at or above next_fetch_offset still buffered, counted from batch headers only."""
        if self.consumed:
            return 0
        count = 0
        if self._batch is not None:
            count += sum(1 for r in self._batch.records[self._index :] if r.offset >= self.next_fetch_offset)
        pos = self._pos
        while len(self._buf) - pos >= LOG_OVERHEAD + 49:  # enough for the header fields read below
            size = peek_size(self._buf, pos)
            if size is None or size > len(self._buf) - pos:
                break
            base = int.from_bytes(self._buf[pos : pos + 8], "big", signed=True)
            last_delta = int.from_bytes(self._buf[pos + 23 : pos + 27], "big", signed=True)
            count += max(0, base + last_delta + 1 - max(base, self.next_fetch_offset))
            pos += size
        return count

    def drain(self) -> None:
        self.consumed = True
        self._batch = None
        self._buf = b""

    def fetch_records(self, max_records: int) -> list[ConsumerRecord]:
        """Up to `max_records` records from next_fetch_offset on; raises a stored error once nothing precedes it."""
        if self._error is not None:
            raise self._error
        out: list[ConsumerRecord] = []
        while len(out) < max_records and not self.consumed:
            try:
                if self._batch is None and not self._next_batch():
                    break
            except KafkaError:
                if out:
                    return out  # the records before a bad batch first; its error comes with the next call
                raise
            batch = self._batch
            assert batch is not None
            if self._index >= len(batch.records):
                # Done with this batch; compaction may have removed its last records.
                self.next_fetch_offset = max(self.next_fetch_offset, batch.last_offset + 1)
                self._batch = None
                continue
            record = batch.records[self._index]
            if record.offset < self.next_fetch_offset:
                self._index += 1  # below the fetch offset: the broker sent the whole batch
                continue
            try:
                key = self._key_de(record.key)
            except Exception as exc:
                self._error = RecordDeserializationError(self.tp, record.offset, "key", exc)
            else:
                try:
                    value = self._value_de(record.value)
                except Exception as exc:
                    self._error = RecordDeserializationError(self.tp, record.offset, "value", exc)
            if self._error is not None:
                self.next_fetch_offset = record.offset
                if out:
                    return out
                raise self._error
            epoch = batch.header.partition_leader_epoch
            out.append(
                ConsumerRecord(
                    topic=self.tp.topic,
                    partition=self.tp.partition,
                    offset=record.offset,
                    timestamp=record.timestamp,
                    key=key,
                    value=value,
                    headers=record.headers,
                    leader_epoch=epoch if epoch >= 0 else None,
                    serialized_key_size=-1 if record.key is None else len(record.key),
                    serialized_value_size=-1 if record.value is None else len(record.value),
                )
            )
            self._index += 1
            self.next_fetch_offset = record.offset + 1
        self._settle_if_exhausted()
        return out

    def _settle_if_exhausted(self) -> None:
        """Notice the end of the data now rather than on the next call, so the partition can be fetched again."""
        batch = self._batch
        if batch is not None and self._index >= len(batch.records):
            self.next_fetch_offset = max(self.next_fetch_offset, batch.last_offset + 1)
            self._batch = None
        if self._batch is None and self._pos >= len(self._buf) and self._error is None:
            self.drain()

    def _batch_end(self, pos: int) -> int | None:
        """The offset after the batch at `pos`, from its header alone, or None when even that is unreadable."""
        try:
            header = parse_header(self._buf, pos)
        except CorruptRecordError:
            return None
        return header.next_offset if header.next_offset > self.next_fetch_offset else None

    def _wholly_below_fetch_offset(self, pos: int) -> bool:
        """The batch at `pos` ends below next_fetch_offset (by a sound header, and CRC when checked)."""
        try:
            header = parse_header(self._buf, pos)
        except CorruptRecordError:
            return False  # decoding it gives the precise error
        if header.last_offset >= self.next_fetch_offset:
            return False
        if self._check_crcs and not crc_matches(self._buf, pos, header):
            return False
        if self._aborted is not None:
            try:
                self._aborted.skip(header, self._buf, pos)  # an ABORT marker down there still ends its range
            except CorruptRecordError:
                return False  # decoding it gives the precise error
        return True

    def _next_batch(self) -> bool:
        """Decode the next whole batch; False when the data ends (or only a cut-off batch is left)."""
        while True:
            remaining = len(self._buf) - self._pos
            size = peek_size(self._buf, self._pos)
            if remaining == 0 or size is None or size > remaining:
                if remaining and not self._decoded_any:
                    self._error = KafkaError(
                        f"the batch at offset {self.next_fetch_offset} of {self.tp} is {size} bytes, larger than "
                        f"max_partition_fetch_bytes ({self._max_partition_fetch_bytes}) allowed the broker to "
                        f"return; raise max_partition_fetch_bytes to read it",
                        ErrorCode.RECORD_LIST_TOO_LARGE,
                    )
                    raise self._error
                self.drain()
                return False
            if self._wholly_below_fetch_offset(self._pos):
                self._pos += size  # a bad batch there, which the application sought past, is never decoded
                self._decoded_any = True
                continue
            start = self._pos
            try:
                batch = decode_for_consumer(self._buf, start, check_crc=self._check_crcs)
                aborted = self._aborted is not None and self._aborted.skip(batch.header, self._buf, start)
            except CorruptRecordError as exc:
                # Kafka's consumer stops at the bad offset; the batch's offsets (if its header reads) say where to seek.
                self._error = CorruptFetchError(self.tp, self.next_fetch_offset, exc, self._batch_end(start))
                raise self._error from exc
            self._pos += batch.size
            self._decoded_any = True
            if batch.header.partition_leader_epoch >= 0:
                self.last_epoch = batch.header.partition_leader_epoch
            if aborted or batch.is_control:
                # Never returned: an aborted transaction's records, or a marker; the position steps past them.
                self.next_fetch_offset = max(self.next_fetch_offset, batch.last_offset + 1)
                continue
            self._batch = batch
            self._index = 0
            return True
