"""A partition follower's decisions: Kafka's AbstractFetcherThread for one partition, without I/O.

Design notes: docs/replication.md, section "broker/replication/follower.py".
"""

from __future__ import annotations

from kraftpy.broker.replication.actions import (
    Action,
    AppendAsFollower,
    IndexAbortedTxn,
    RebuildProducerState,
    TruncateFullyAndStartAt,
    TruncateTo,
    UpdateHighWatermark,
)
from kraftpy.broker.replication.config import ReplicationConfig
from kraftpy.broker.replication.model import (
    UNKNOWN_BROKER_EPOCH,
    EpochEndOffset,
    FetchPartition,
    FetchPartitionResponse,
    LogState,
    PartitionRegistration,
)
from kraftpy.broker.replication.producer_state import ProducerStateManager
from kraftpy.protocol.errors import CorruptRecordError, ErrorCode
from kraftpy.protocol.records.control import read_marker
from kraftpy.protocol.records.header import BatchHeader, parse_header, peek_size


def truncation_offset(diverging: EpochEndOffset, own: EpochEndOffset, log_end_offset: int) -> tuple[int, bool]:
    """Kafka's getOffsetTruncationState: where to truncate, and whether the divergence is fully resolved.

    `own` is the follower's end_offset_for(diverging.epoch).
    """
    if own.undefined:
        # The follower has no epoch at or below the leader's: everything it holds from there is suspect.
        return min(diverging.end_offset, log_end_offset), True
    if own.epoch != diverging.epoch:
        # The follower never saw the leader's epoch: cut back to the end of its own largest epoch below it
        # and ask again with that epoch (KIP-279's multi-round case).
        return min(own.end_offset, log_end_offset), False
    return min(own.end_offset, diverging.end_offset, log_end_offset), True


def whole_batches(records: bytes) -> tuple[list[BatchHeader], int]:
    """Headers of the whole, CRC-valid batches at the start of `records`, and how many bytes they span.

    A partial batch at the end (a fetch cut by max_bytes) is left for the next fetch; a corrupt one raises.
    """
    headers: list[BatchHeader] = []
    pos, end = 0, len(records)
    while pos < end:
        size = peek_size(records, pos)
        if size is None or pos + size > end:
            break
        header = parse_header(records, pos, check_crc=True)
        headers.append(header)
        pos += header.size
    return headers, pos


class PartitionFollower:
    def __init__(
        self,
        replica_id: int,
        registration: PartitionRegistration,
        log: LogState,
        config: ReplicationConfig,
        producers: ProducerStateManager,
        broker_epoch: int = UNKNOWN_BROKER_EPOCH,
    ) -> None:
        self.replica_id = replica_id
        self.leader_id = registration.leader
        self.leader_epoch = registration.leader_epoch
        self.partition_epoch = registration.partition_epoch
        self.config = config
        self.producers = producers
        self.broker_epoch = broker_epoch
        self.high_watermark = min(max(log.high_watermark, log.log_start_offset), log.log_end_offset)
        # A replay completes transactions whose markers may already be below the HW: they no longer count.
        producers.on_high_watermark(self.high_watermark)
        self.inflight: FetchPartition | None = None
        self.retry_at_ms = 0
        self.last_error = ErrorCode.NONE
        self.corrupt_answers = 0  # answers refused whole: a corrupt batch, or offsets not continuing the log
        # A divergence answer that repeats without progress would loop forever; count and back off.
        self._last_divergence: tuple[int, EpochEndOffset] | None = None

    def build_fetch(self, log: LogState, now_ms: int) -> FetchPartition | None:
        """The next fetch for this partition, or None while one is in flight or the follower backs off."""
        if self.inflight is not None or now_ms < self.retry_at_ms:
            return None
        self.inflight = FetchPartition(
            replica_id=self.replica_id,
            fetch_offset=log.log_end_offset,
            current_leader_epoch=self.leader_epoch,
            last_fetched_epoch=log.latest_epoch,
            log_start_offset=log.log_start_offset,
            broker_epoch=self.broker_epoch,
        )
        return self.inflight

    def on_fetch_error(self, request: FetchPartition, now_ms: int) -> None:
        """The fetch failed without an answer (timeout, connection loss): back off and fetch again."""
        if request is self.inflight:
            self.inflight = None
            self._back_off(ErrorCode.NETWORK_EXCEPTION, now_ms)

    def _back_off(self, error: ErrorCode, now_ms: int) -> None:
        self.last_error = error
        self.retry_at_ms = now_ms + self.config.replica_fetch_backoff_ms

    def _set_high_watermark(self, leader_high_watermark: int, log_end_offset: int, log_start: int) -> list[Action]:
        new_hw = max(min(leader_high_watermark, log_end_offset), log_start)
        if new_hw == self.high_watermark:
            return []
        self.high_watermark = new_hw
        self.producers.on_high_watermark(new_hw)
        return [UpdateHighWatermark(new_hw)]

    def on_fetch_response(
        self,
        request: FetchPartition,
        response: FetchPartitionResponse,
        now_ms: int,
        own_epoch_end: EpochEndOffset | None = None,
    ) -> list[Action]:
        """Act on the leader's answer to `request` (ignored unless it is the fetch in flight).

        When the answer carries a diverging epoch, `own_epoch_end` must be this
        log's end_offset_for(response.diverging_epoch.epoch).
        """
        if request is not self.inflight:
            return []
        self.inflight = None
        if response.error != ErrorCode.NONE:
            return self._on_error(request, response, now_ms)
        if response.diverging_epoch is not None:
            return self._on_diverging(request, response, own_epoch_end, now_ms)
        return self._on_data(request, response, now_ms)

    def _on_error(self, request: FetchPartition, response: FetchPartitionResponse, now_ms: int) -> list[Action]:
        if response.error != ErrorCode.OFFSET_OUT_OF_RANGE:
            # Not leader / fenced / unknown epoch / stale broker epoch / storage trouble: the metadata log will
            # bring the new leader or epoch; until then retry after the backoff (Kafka's partitionsWithError).
            self._back_off(response.error, now_ms)
            return []
        own_leo = request.fetch_offset
        leader_start, leader_end = response.log_start_offset, response.log_end_offset
        if 0 <= leader_end < own_leo:
            # Only reachable without epoch history (an empty log starting beyond the leader's end, after an
            # unclean election): with history the leader would have answered DivergingEpoch.
            actions: list[Action] = []
            if leader_end < request.log_start_offset:
                actions.append(TruncateFullyAndStartAt(leader_end))
            else:
                actions.append(TruncateTo(leader_end))
            actions.append(RebuildProducerState(leader_end))
            actions += self._set_high_watermark(min(self.high_watermark, leader_end), leader_end, 0)
            return actions
        if leader_start > own_leo:
            # Retention on the leader removed what we would fetch next: start over at its log start.
            self.high_watermark = leader_start
            return [
                TruncateFullyAndStartAt(leader_start),
                RebuildProducerState(leader_start),
                UpdateHighWatermark(leader_start),
            ]
        # The leader's range moved between its check and ours; just try again after the backoff.
        self._back_off(response.error, now_ms)
        return []

    def _on_diverging(
        self,
        request: FetchPartition,
        response: FetchPartitionResponse,
        own_epoch_end: EpochEndOffset | None,
        now_ms: int,
    ) -> list[Action]:
        diverging = response.diverging_epoch
        assert diverging is not None
        if diverging.undefined:
            # The leader knows no epoch at or below ours, which fencing rules out; do not guess, retry later.
            self._back_off(ErrorCode.UNKNOWN_LEADER_EPOCH, now_ms)
            return []
        if own_epoch_end is None:
            raise ValueError("a DivergingEpoch answer needs this log's end_offset_for(diverging_epoch.epoch)")
        leo = request.fetch_offset
        offset, _complete = truncation_offset(diverging, own_epoch_end, leo)
        key = (leo, diverging)
        if offset >= leo and key == self._last_divergence:
            # Same answer twice with nothing to cut: the epoch cache was not trimmed. Do not spin.
            self._back_off(ErrorCode.UNKNOWN_LEADER_EPOCH, now_ms)
            return []
        self._last_divergence = key
        # TruncateTo is emitted even when offset == LEO: storage must then still drop epoch-cache entries
        # starting at or after it (an epoch this replica began as leader but never wrote to), as Kafka's
        # truncateTo does, or the next fetch would name the same unknown epoch again.
        actions: list[Action] = [TruncateTo(offset), RebuildProducerState(offset)]
        actions += self._set_high_watermark(min(self.high_watermark, offset), offset, 0)
        return actions

    def _on_data(self, request: FetchPartition, response: FetchPartitionResponse, now_ms: int) -> list[Action]:
        try:
            headers, used = whole_batches(response.records)
        except CorruptRecordError:
            self.corrupt_answers += 1
            self._back_off(ErrorCode.CORRUPT_MESSAGE, now_ms)
            return []
        leo = request.fetch_offset
        actions: list[Action] = []
        if headers:
            expected = leo
            for header in headers:
                if header.base_offset != expected:
                    # Not the continuation of our log: a confused leader or a stale answer; refetch.
                    self.corrupt_answers += 1
                    self._back_off(ErrorCode.CORRUPT_MESSAGE, now_ms)
                    return []
                expected = header.next_offset
            last = headers[-1]
            actions.append(
                AppendAsFollower(
                    response.records[:used], headers[0].base_offset, last.last_offset, last.partition_leader_epoch
                )
            )
            pos = 0
            for header in headers:
                try:
                    marker = read_marker(response.records, header, pos) if header.is_control else None
                except CorruptRecordError:
                    marker = None  # CRC-valid but no marker we can read: no transaction ends (as a replay)
                pos += header.size
                done = self.producers.update(header, marker=marker)
                if done is not None and done.aborted:
                    lso = self.producers.stable_offset_after(done)
                    actions.append(IndexAbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
            leo = last.next_offset
        self._last_divergence = None
        self.last_error = ErrorCode.NONE
        actions += self._set_high_watermark(response.high_watermark, leo, request.log_start_offset)
        return actions
