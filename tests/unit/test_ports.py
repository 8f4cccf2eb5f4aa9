"""The test suite's port reservations: held against other reservations, open to the server that binds them."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.ports import PortReservation, _ephemeral_floor, reserved_ports


def test_a_reserved_port_refuses_another_reservation_and_outgoing_source_ports() -> None:
    with reserved_ports(3) as ports:
        assert len(set(ports)) == 3
        # below the ephemeral range: no outgoing connection takes one as its source port
        assert all(p < _ephemeral_floor() for p in ports)
        for port in ports:
            with socket.socket() as other, pytest.raises(OSError):
                other.bind(("127.0.0.1", port))


def test_the_server_binds_a_reserved_port_beside_the_reservation() -> None:
    async def serve(port: int) -> int:
        ended = asyncio.Event()

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # the client closes first, so no TIME_WAIT is left on the server's port
            writer.close()
            ended.set()

        server = await asyncio.start_server(answer, "127.0.0.1", port)
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            await asyncio.wait_for(ended.wait(), 10)
            return server.sockets[0].getsockname()[1]
        finally:
            server.close()
            await server.wait_closed()

    reservation = PortReservation(2, consecutive=True)
    try:
        first, second = reservation.ports
        assert second == first + 1
        assert asyncio.run(serve(first)) == first
        assert asyncio.run(serve(first)) == first  # again, as a restarted node does
    finally:
        reservation.release()
    with socket.socket() as after:
        after.bind(("127.0.0.1", first))  # released: free for anyone
