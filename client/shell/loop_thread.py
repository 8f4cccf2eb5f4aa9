"""A private asyncio event loop on a daemon thread, for the synchronous client wrappers.

`run(coro)` executes a coroutine on the loop and blocks for its result;
`bridge(asyncio_future)` turns a future of that loop into a
concurrent.futures.Future that any thread can wait on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "kraftpy-client") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._started = threading.Event()
        self._thread.start()
        self._started.wait()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._started.set)
        self.loop.run_forever()
        self.loop.close()

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run `coro` on the loop and wait for its result (exceptions propagate)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("a sync client method was called from its own event loop thread")
        if not self.running:
            coro.close()
            raise RuntimeError("the client's event loop has stopped (was the client closed?)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def bridge(self, future: asyncio.Future[T]) -> concurrent.futures.Future[T]:
        """A thread-safe view of an asyncio future living on this loop (call from the loop thread)."""
        out: concurrent.futures.Future[T] = concurrent.futures.Future()

        def copy(src: asyncio.Future[T]) -> None:
            if src.cancelled():
                out.cancel()
            elif src.exception() is not None:
                out.set_exception(src.exception())  # type: ignore[arg-type]
            else:
                out.set_result(src.result())

        future.add_done_callback(copy)
        return out

    def stop(self) -> None:
        if self.running:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join()
