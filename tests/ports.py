"""Ports for the servers tests start, held from the moment they are chosen until the test ends.

A port the kernel reports free can be taken before the server binds it: by a test on the other
xdist worker, or as the source port of any outgoing connection (the kernel's ephemeral range).
CI lost a run to that. So ports come from below the ephemeral range, and each is held by a bound
socket that is refused to any other reservation (it binds without SO_REUSEADDR) but lets the
server itself bind beside it (SO_REUSEADDR is set after the bind; aiohttp, asyncio servers and
kraftpy nodes all bind with it), in this process or a child.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_LOWEST_PORT = 10_000
_ATTEMPTS = 500


def _ephemeral_floor() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _hold(port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        return None
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock


class PortReservation:
    """`count` ports on 127.0.0.1 (consecutive if asked), held until `release()`."""

    def __init__(self, count: int, *, consecutive: bool = False) -> None:
        self._held: list[socket.socket] = []
        top = _ephemeral_floor() - count
        rng = random.Random()
        for _ in range(_ATTEMPTS):
            if consecutive:
                base = rng.randrange(_LOWEST_PORT, top)
                wanted = list(range(base, base + count))
            else:
                wanted = [rng.randrange(_LOWEST_PORT, top) for _ in range(count - len(self._held))]
            held = [s for s in (_hold(p) for p in wanted) if s is not None]
            if consecutive and len(held) < count:
                for s in held:
                    s.close()
                continue
            self._held.extend(held)
            if len(self._held) == count:
                self.ports = [s.getsockname()[1] for s in self._held]
                return
        self.release()
        raise RuntimeError(f"no {count} free ports found below the ephemeral range")

    def release(self) -> None:
        for sock in self._held:
            sock.close()
        self._held = []


@contextmanager
def reserved_ports(count: int, *, consecutive: bool = False) -> Iterator[list[int]]:
    """`with reserved_ports(2) as (a, b):` held for the block."""
    reservation = PortReservation(count, consecutive=consecutive)
    try:
        yield reservation.ports
    finally:
        reservation.release()
