"""Producer and consumer interceptors, as Kafka's ProducerInterceptor and ConsumerInterceptor.

A producer interceptor sees each record before it is serialized and
partitioned (and may return a changed record), and sees each acknowledgement
(the offset, or the error). A consumer interceptor sees each polled batch of
records before the application does. An interceptor that raises is logged and
skipped, as in Kafka: an interceptor never breaks the data path.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class ProducerInterceptor(Protocol):
    def on_send(self, record: Any) -> Any: ...

    def on_acknowledgement(self, metadata: Any, error: BaseException | None) -> None: ...


class ConsumerInterceptor(Protocol):
    def on_consume(self, records: list[Any]) -> list[Any]: ...


def run_on_send(interceptors: Sequence[ProducerInterceptor], record: T) -> T:
    for interceptor in interceptors:
        try:
            record = interceptor.on_send(record)
        except Exception:
            log.exception("producer interceptor %r failed in on_send; record passed on unchanged", interceptor)
    return record


def run_on_acknowledgement(
    interceptors: Sequence[ProducerInterceptor], metadata: Any, error: BaseException | None
) -> None:
    for interceptor in interceptors:
        try:
            interceptor.on_acknowledgement(metadata, error)
        except Exception:
            log.exception("producer interceptor %r failed in on_acknowledgement", interceptor)


def run_on_consume(interceptors: Sequence[ConsumerInterceptor], records: list[T]) -> list[T]:
    for interceptor in interceptors:
        try:
            records = interceptor.on_consume(records)
        except Exception:
            log.exception("consumer interceptor %r failed in on_consume; records passed on unchanged", interceptor)
    return records
