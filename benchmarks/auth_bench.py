"""What request authentication adds to one call: the same route served with and without `auth`, one process.

A stream frame (Raft, follower fetches) and an HTTP request (signed and
verified) to a route that needs the cluster role, against the same route on a
server without authentication, in interleaved blocks so that other work on
the machine hits both alike. docs/security.md has the figures.

    python benchmarks/auth_bench.py [--blocks 20] [--calls 100] [--size 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from typing import Any

from aiohttp import web

from kraftpy.protocol.auth import Verifier
from kraftpy.protocol.credentials import Credential
from kraftpy.protocol.shell.rpc import RpcClient, make_app
from kraftpy.protocol.shell.rpc_auth import ServerAuth
from kraftpy.protocol.types import Address

ROUTE = "/raft/fetch"  # cluster-internal: guarded, and verified over HTTP


async def _answer(body: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True}


async def _serve(app: web.Application) -> tuple[web.AppRunner, Address]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, ("127.0.0.1", site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]


async def run(blocks: int, calls: int, size: int) -> dict[str, float]:
    node = Credential.generate("node", "cluster")
    plain_runner, plain = await _serve(make_app({ROUTE: _answer}))
    auth_runner, guarded = await _serve(make_app({ROUTE: _answer}, auth=ServerAuth(Verifier({"node": node}))))
    clients = {
        (signed, streams): RpcClient(credential=node if signed else None, peer_streams=streams)
        for signed in (False, True)
        for streams in (False, True)
    }
    body = {"payload": b"x" * size}
    cases = [
        ("stream, without auth", clients[False, True], plain),
        ("stream, with auth", clients[True, True], guarded),
        ("http, without auth", clients[False, False], plain),
        ("http, with auth", clients[True, False], guarded),
    ]
    samples: dict[str, list[float]] = {name: [] for name, *_ in cases}
    try:
        for _, client, address in cases:  # warm-up: connections and streams
            await client.call(address, ROUTE, body)
        for _ in range(blocks):
            for name, client, address in cases:
                for _ in range(calls):
                    start = time.perf_counter()
                    await client.call(address, ROUTE, body)
                    samples[name].append((time.perf_counter() - start) * 1000)
    finally:
        for client in clients.values():
            await client.close()
        await plain_runner.cleanup()
        await auth_runner.cleanup()
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--calls", type=int, default=100, help="calls per block and case")
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    medians = asyncio.run(run(args.blocks, args.calls, args.size))
    for name, p50_ms in medians.items():
        print(f"{name:22} p50 {p50_ms:.3f} ms")
    print(f"load average {load_before:.1f} -> {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
