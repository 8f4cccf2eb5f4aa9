"""ReplicaFetcherManager: one ReplicaFetcher per source broker, created and retired as leaderships move.

Design notes: docs/replication.md, section "broker/shell/fetcher_manager.py".
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from kraftpy.broker.replica_settings import ReplicaManagerSettings
from kraftpy.broker.shell.partition_host import HostedPartition, TopicPartitionKey
from kraftpy.broker.shell.replica_fetcher import ReplicaFetcher
from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.shell.rpc import RpcClient
from kraftpy.protocol.types import Address


class ReplicaFetcherManager:
    def __init__(
        self,
        broker_id: int,
        settings: ReplicaManagerSettings,
        address_of: Callable[[int], Address | None],
        broker_epoch_provider: Callable[[], int],
        credential: Credential | None = None,
    ) -> None:
        self.broker_id = broker_id
        # A follower's fetch is cluster-internal: it is signed with the node's credential (docs/security.md).
        self.rpc = RpcClient(
            request_timeout_ms=settings.replica_socket_timeout_ms, credential=credential, peer_streams=True
        )
        self.settings = settings
        self.address_of = address_of
        self.broker_epoch_provider = broker_epoch_provider
        self.fetchers: dict[int, ReplicaFetcher] = {}
        self._source_of: dict[TopicPartitionKey, int] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self.paused = False

    def follow(self, hosted: HostedPartition, leader_id: int) -> None:
        current = self._source_of.get(hosted.key)
        if current is not None and current != leader_id:
            self._remove_from(current, hosted)
        fetcher = self.fetchers.get(leader_id)
        if fetcher is None:
            fetcher = self.fetchers[leader_id] = ReplicaFetcher(
                leader_id, self.broker_id, self.rpc, self.settings, self.address_of, self.broker_epoch_provider
            )
            if not self.paused:
                fetcher.start()
        fetcher.add(hosted)
        self._source_of[hosted.key] = leader_id

    def unfollow(self, hosted: HostedPartition) -> None:
        current = self._source_of.pop(hosted.key, None)
        if current is not None:
            self._remove_from(current, hosted)

    def _remove_from(self, source: int, hosted: HostedPartition) -> None:
        fetcher = self.fetchers.get(source)
        if fetcher is None:
            return
        fetcher.remove(hosted)
        if not fetcher.partitions:
            del self.fetchers[source]
            task = asyncio.get_running_loop().create_task(fetcher.stop())
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    def wake_all(self) -> None:
        for fetcher in self.fetchers.values():
            fetcher.wake()

    async def pause(self) -> None:
        """Stop fetching (tests: a follower that stops fetching must leave the ISR)."""
        self.paused = True
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))

    def resume(self) -> None:
        self.paused = False
        for fetcher in self.fetchers.values():
            fetcher.start()

    async def stop(self) -> None:
        await asyncio.gather(*(f.stop() for f in self.fetchers.values()))
        self.fetchers.clear()
        self._source_of.clear()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        await self.rpc.close()

    def status(self) -> dict[str, Any]:
        return {
            str(source): {
                "partitions": len(f.partitions),
                "requests_sent": f.requests_sent,
                "failures": f.failures,
                "corrupt_answers": f.corrupt_answers,
            }
            for source, f in sorted(self.fetchers.items())
        }
