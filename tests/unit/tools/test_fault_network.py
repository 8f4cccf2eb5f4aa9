"""The run's network choice (tools/faults/netns.py): namespaces where the machine can, else loopback."""

from __future__ import annotations

import ipaddress

import pytest

from kraftpy.tools.faults.netns import LoopbackNet, NetError, choose_network, loopback_subnet, supported
from kraftpy.tools.faults.partitions import CLIENT, isolate
from kraftpy.tools.faults.schedule import NEMESES, needs_partitions


def test_loopback_is_used_when_asked_and_auto_uses_namespaces_where_the_machine_can() -> None:
    assert choose_network("loopback")[0] == "loopback"
    ok, _ = supported()
    assert choose_network("auto")[0] == ("netns" if ok else "loopback")
    if ok:
        assert choose_network("netns")[0] == "netns"
    else:
        with pytest.raises(NetError):
            choose_network("netns")  # CI asks for namespaces: a machine without them fails, never falls back


def test_loopback_nodes_have_addresses_of_their_own_in_127_8_and_no_partition() -> None:
    net = LoopbackNet("r1234", (1, 2, 3))
    net.setup()
    addresses = net.addresses
    assert len(set(addresses.values())) == 4
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("127.0.0.0/8") for a in addresses.values())
    assert net.subnet == loopback_subnet("r1234") != loopback_subnet("r5678")
    assert net.namespace(1) == "" and net.namespaces() == []
    net.heal()  # nothing to heal
    with pytest.raises(NetError, match="network namespaces"):
        net.apply(isolate((CLIENT, 1, 2, 3), 1))


def test_the_nemeses_loopback_mode_refuses_are_the_partitions() -> None:
    refused = needs_partitions(NEMESES)
    assert "isolate" in refused and "isolate-leader" in refused and "client-partition" in refused
    assert not {"kill", "pause", "kill-leader", "pause-leader", "lose-tail", "disk-full"} & set(refused)
