"""One kraftpy node process: the composition root that wires components onto one HTTP port.

A node runs the components its roles ask for (the Raft quorum member or
observer, the active-controller shell, the broker). Each component brings its
CBOR routes, a start, a graceful stop and a status; the node adds
`/admin/status`, owns the signal handling, and stops components in reverse
order so that leaderships move before the process exits (controlled shutdown,
then Raft resignation).
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import signal
import time
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from kraftpy.node import meta_properties
from kraftpy.node.config import NodeConfig
from kraftpy.node.start_errors import ListenError
from kraftpy.protocol.auth import Verifier
from kraftpy.protocol.shell.credential_files import load_node_secrets
from kraftpy.protocol.shell.rpc import Handler, RpcClient, make_app
from kraftpy.protocol.shell.rpc_auth import ServerAuth
from kraftpy.protocol.shell.rpc_limits import LimitedTCPSite

log = logging.getLogger(__name__)

STATUS_PATH = "/admin/status"


class Component(Protocol):
    """What a node runs: routes to serve, a lifecycle and a status for `/admin/status`."""

    name: str

    def routes(self) -> Mapping[str, Handler]: ...

    async def start(self) -> None: ...

    async def stop(self, graceful: bool) -> None: ...

    def status(self) -> dict[str, Any]: ...


# Factories "module:function", in start order. Each is called as
# factory(node) -> Component | None and decides from node.config whether its
# component runs here; a later component finds earlier ones with node.component(name).
COMPONENT_FACTORIES: list[str] = [
    "kraftpy.raft.shell.component:create_raft_component",
    "kraftpy.metadata.shell.publisher:create",
    "kraftpy.metadata.shell.controller_component:create",
    "kraftpy.broker.shell.server:create",
]


def component_factories() -> list[Any]:
    factories = []
    for entry in COMPONENT_FACTORIES:
        module_name, attr = entry.split(":")
        factories.append(getattr(importlib.import_module(module_name), attr))
    return factories


class Node:
    def __init__(self, config: NodeConfig, *, shutdown_timeout_ms: int = 10_000) -> None:
        self.config = config
        self.shutdown_timeout_ms = shutdown_timeout_ms
        self.meta = meta_properties.verify(config.data_dir, config.node_id)
        self.components: list[Component] = []
        keyring, credential = load_node_secrets(config.secrets_dir)
        self.auth = ServerAuth(Verifier(keyring, max_clock_skew_ms=config.auth_max_clock_skew_ms))
        # The node's calls to the other nodes (Raft, controller, coordinators) travel on one stream per peer.
        self.rpc = RpcClient(
            request_timeout_ms=config.controller_quorum_request_timeout_ms, credential=credential, peer_streams=True
        )
        self.started_at = time.time()
        self._stop = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._site: LimitedTCPSite | None = None

    @property
    def cluster_id(self) -> str:
        return self.meta.cluster_id

    def component(self, name: str) -> Any:
        """The running component called `name` (components start in factory order)."""
        for component in self.components:
            if component.name == name:
                return component
        raise LookupError(f"no component {name!r} on node {self.config.node_id}")

    def request_stop(self) -> None:
        self._stop.set()

    async def _status(self, body: dict[str, Any]) -> dict[str, Any]:
        return {
            "node_id": self.config.node_id,
            "cluster_id": self.cluster_id,
            "pid": os.getpid(),
            "roles": list(self.config.process_roles),
            "address": f"{self.config.host}:{self.config.port}",
            "uptime_ms": int((time.time() - self.started_at) * 1000),
            "listener": self._site.status() if self._site is not None else {},
            "auth": {"principals": len(self.auth.verifier.keyring), "refused": self.auth.refused},
            **{c.name: c.status() for c in self.components},
        }

    async def start(self) -> None:
        for factory in component_factories():
            component = factory(self)
            if component is not None:
                self.components.append(component)
        routes: dict[str, Handler] = {STATUS_PATH: self._status}
        for component in self.components:
            for path, handler in component.routes().items():
                if path in routes:
                    raise RuntimeError(f"two components serve {path}")
                routes[path] = handler
        limits = self.config.listener_limits()
        self._runner = web.AppRunner(
            make_app(routes, limits=limits, auth=self.auth),
            access_log=None,
            handle_signals=False,
            keepalive_timeout=limits.connections_max_idle_ms / 1000,  # from accept on: idle and half-open
        )
        await self._runner.setup()
        self._site = LimitedTCPSite(self._runner, self.config.host, self.config.port, limits, reuse_address=True)
        try:
            await self._site.start()
        except OSError as exc:
            raise ListenError(self.config.host, self.config.port, exc) from exc
        for component in self.components:
            await component.start()
        log.info(
            "node %d serving on %s:%d (cluster %s, roles %s)",
            self.config.node_id,
            self.config.host,
            self.config.port,
            self.cluster_id,
            ",".join(self.config.process_roles),
        )

    async def stop(self, graceful: bool = True) -> None:
        for component in reversed(self.components):
            try:
                await asyncio.wait_for(component.stop(graceful), self.shutdown_timeout_ms / 1000)
            except Exception:
                log.exception("stopping %s failed", component.name)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.rpc.close()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        await self.start()
        try:
            await self._stop.wait()
            log.info("node %d stopping", self.config.node_id)
        finally:
            await self.stop(graceful=True)
