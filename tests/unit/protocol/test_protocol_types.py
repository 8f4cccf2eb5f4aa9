"""parse_address: the one reading of a 'host:port' hint every package uses."""

from __future__ import annotations

from kraftpy.protocol.types import format_address, parse_address


def test_parse_address_reads_host_and_port() -> None:
    assert parse_address("broker-1:9092") == ("broker-1", 9092)
    assert parse_address("127.0.0.1:1") == ("127.0.0.1", 1)


def test_parse_address_strips_the_brackets_of_an_ipv6_host() -> None:
    assert parse_address("[::1]:9093") == ("::1", 9093)
    assert parse_address("[fe80::1%eth0]:9092") == ("fe80::1%eth0", 9092)
    assert parse_address("::1:9093") == ("::1", 9093)  # unbracketed: the last colon is the port's


def test_parse_address_refuses_anything_else() -> None:
    for text in (None, 9092, "", "host", "host:", ":9092", "host:port", "host:-1", b"h:1"):
        assert parse_address(text) is None, text


def test_format_address_brackets_ipv6_and_parse_reads_it_back() -> None:
    assert format_address("broker-1", 9092) == "broker-1:9092"
    assert format_address("::1", 9093) == "[::1]:9093"
    assert format_address("[::1]", 9093) == "[::1]:9093"  # already bracketed (a configured voter host)
    for address in (("broker-1", 9092), ("127.0.0.1", 1), ("::1", 9093), ("fe80::1", 2)):
        assert parse_address(format_address(*address)) == address
