"""Real partitions in network namespaces (tools/faults/netns.py): TCP is really cut, a real cluster survives.

Root is needed. Where namespaces cannot be made the tests FAIL (never skip): CI must run them
(issue 18). Each test makes its own run's namespaces and addresses (10.207.N.0/24, N chosen to
collide with nothing on the machine) and removes them, and stops every process it started by pid.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kraftpy.tools.faults import partitions
from kraftpy.tools.faults.netns import OWNERS_DIR, FaultNet, list_namespaces, supported
from kraftpy.tools.faults.partitions import CLIENT
from tests.conftest import FAULT_NET_GROUP
from tests.integration.test_cluster_support import CLI_TIMEOUT_S, CliResult, LocalCluster, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group(FAULT_NET_GROUP)]  # namespaces: with the fault runs

NODES = (1, 2, 3)
PORT = 7000
LISTENER_LIFETIME_S = 120  # the probe listener exits by itself even if the test's cleanup never ran
LISTEN = (
    "import socket,sys,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);"
    "s.bind((sys.argv[1],int(sys.argv[2])));s.listen(16);s.settimeout(1);end=time.monotonic()+float(sys.argv[3])\n"
    "while time.monotonic()<end:\n"
    " try: s.accept()[0].close()\n"
    " except OSError: pass"
)
CONNECT = (
    "import socket,sys\ntry: socket.create_connection((sys.argv[1],int(sys.argv[2])),timeout=1.5).close()\n"
    "except OSError: sys.exit(1)"
)


@pytest.fixture
def net():
    ok, why = supported()
    if not ok:
        pytest.fail(f"fault runs need network namespaces: {why} (docs/jepsen.md)")
    fault_net = FaultNet(f"t{secrets.token_hex(4)}", NODES)
    try:
        fault_net.setup()
        yield fault_net
    finally:
        fault_net.teardown()
        leftovers = [n for n in list_namespaces() if n.startswith(f"kpf-{fault_net.run_id}-")]
        assert not leftovers, f"teardown left {leftovers}"


def connects(net: FaultNet, src: int, dst: int) -> bool:
    probe = [*net.exec_prefix(src), sys.executable, "-c", CONNECT, net.address(dst), str(PORT)]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


@contextlib.contextmanager
def listeners(net: FaultNet, members: tuple[int, ...]):
    procs = [
        subprocess.Popen(
            [*net.exec_prefix(m), sys.executable, "-c", LISTEN, net.address(m), str(PORT), str(LISTENER_LIFETIME_S)]
        )
        for m in members
    ]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=10)


def test_a_two_way_partition_really_cuts_tcp_both_ways_until_healed(net: FaultNet) -> None:
    with listeners(net, (1, 2, 3)):
        wait_for("every listener up", lambda: all(connects(net, a, b) for a, b in ((1, 2), (2, 1), (1, 3))))
        net.apply(partitions.isolate(NODES, 1))
        assert not connects(net, 1, 2) and not connects(net, 2, 1)
        assert not connects(net, 1, 3) and not connects(net, 3, 1)
        assert connects(net, 2, 3) and connects(net, 3, 2)
        net.heal()
        assert connects(net, 1, 2) and connects(net, 2, 1)
        net.apply(partitions.one_way(1, 2))  # SYNs lost one way, SYN-ACKs the other: no connection either way
        assert not connects(net, 1, 2) and not connects(net, 2, 1) and connects(net, 1, 3)
        net.heal()
        assert connects(net, 1, 2)


def test_a_client_partition_cuts_the_clients_from_one_node_only(net: FaultNet) -> None:
    with listeners(net, (CLIENT, 1, 2, 3)):
        wait_for("every listener up", lambda: all(connects(net, CLIENT, n) for n in NODES))
        net.apply(partitions.cut_clients(NODES, [2]))  # nft rules in the client namespace and node 2's
        assert not connects(net, CLIENT, 2) and not connects(net, 2, CLIENT)
        assert connects(net, CLIENT, 1) and connects(net, CLIENT, 3)
        assert connects(net, 2, 1) and connects(net, 1, 2)  # the nodes still hear each other
        net.heal()
        assert connects(net, CLIENT, 2)


def test_setup_again_replaces_a_leftover_network(net: FaultNet) -> None:
    net.setup()  # idempotent: the same run's network made again from scratch
    with listeners(net, (2,)):
        wait_for("node 2 reachable from the client namespace", lambda: connects(net, CLIENT, 2))


class NetnsCluster(LocalCluster):
    """A LocalCluster whose nodes each run in their namespace; every CLI call runs in the client namespace."""

    def __init__(self, directory: Path, net: FaultNet) -> None:
        super().__init__(directory, nodes=len(net.node_ids))
        self.net = net

    def cli(self, *args: str, timeout_s: float = CLI_TIMEOUT_S, stdin: str | None = None) -> CliResult:
        proc = subprocess.run(
            [*self.net.exec_prefix(CLIENT), sys.executable, "-m", "kraftpy.tools.cli", *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=self.env,
            input=stdin or "",
        )
        return CliResult(tuple(args), proc.returncode, proc.stdout, proc.stderr)

    def start_in_namespaces(self) -> None:
        self.start(
            "--host", ",".join(self.net.address(n) for n in self.net.node_ids),
            "--netns", ",".join(self.net.namespace(n) for n in self.net.node_ids),
        )  # fmt: skip

    def produce(self, topic: str, lines: list[str]) -> CliResult:
        return self.cli("produce", topic, "-p", "0", "--acks", "all", "--delivery-timeout-ms", "20000",
                        stdin="\n".join(lines) + "\n")  # fmt: skip

    def leader(self, topic: str) -> int:
        return self.describe(topic)["partitions"][0]["leader"]

    def isr(self, topic: str) -> list[int]:
        return self.describe(topic)["partitions"][0]["isr"]

    def stop(self) -> None:
        super().stop()
        with contextlib.suppress(Exception):  # a node whose `cluster stop` could not reach it
            for entry in self.layout().nodes:
                pid = self.layout().read_pid(entry)
                if pid is not None:
                    os.kill(pid, signal.SIGKILL)


def test_a_cluster_in_namespaces_survives_isolating_the_partition_leader(net: FaultNet, tmp_path: Path) -> None:
    cluster = NetnsCluster(tmp_path / "cluster", net)
    topic = "netns"
    members = (CLIENT, *NODES)
    try:
        cluster.start_in_namespaces()
        layout = cluster.layout()
        assert {n.netns for n in layout.nodes} == {net.namespace(n) for n in NODES}
        assert {n.host for n in layout.nodes} == {net.address(n) for n in NODES}
        cluster.ok("topics", "create", topic, "--partitions", "1", "--replication-factor", "3",
                   "--config", "min_insync_replicas=2")  # fmt: skip
        before = [f"before-{i}" for i in range(50)]
        assert cluster.produce(topic, before).code == 0
        wait_for("all three replicas in sync", lambda: len(cluster.isr(topic)) == 3)
        old_leader = cluster.leader(topic)

        net.apply(partitions.isolate(members, old_leader))  # from the other nodes and from the clients
        wait_for("a new partition leader", lambda: cluster.leader(topic) not in (old_leader, -1, None), timeout_s=60)
        during = [f"during-{i}" for i in range(50)]
        # acks=all with min_insync_replicas=2: acknowledged by the two connected nodes alone
        wait_for("a produce acknowledged", lambda: cluster.produce(topic, during).code == 0, timeout_s=60)
        assert cluster.pid(old_leader) is not None, "the isolated node must not die of the partition"

        net.heal()
        wait_for("the healed node back in the ISR", lambda: len(cluster.isr(topic)) == 3, timeout_s=90)
        wait_for("a healthy cluster", lambda: cluster.health()["healthy"], timeout_s=60)
        after = [f"after-{i}" for i in range(20)]
        assert cluster.produce(topic, after).code == 0
        read = cluster.ok("consume", topic, "--from-beginning", "--timeout-ms", "5000").stdout.split()
        for value in before + after:
            assert read.count(value) == 1, f"acknowledged {value} read {read.count(value)} times"
        assert all(value in read for value in during)
    finally:
        cluster.stop()


def kraftpy(*args: str, timeout_s: float = CLI_TIMEOUT_S, cwd: Path | None = None) -> CliResult:
    proc = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", *args], capture_output=True, text=True, timeout=timeout_s, cwd=cwd
    )
    return CliResult(tuple(args), proc.returncode, proc.stdout, proc.stderr)


def test_cleanup_removes_the_network_of_a_run_whose_owner_died(net: FaultNet) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (OWNERS_DIR / f"{net.run_id}.pid").write_text(dead.stdout)  # as if the run had been killed
    with listeners(net, (1,)):  # a process left inside, as a killed run's node would be
        result = kraftpy("faults", "cleanup")
        assert result.code == 0, str(result)
        assert not [n for n in list_namespaces() if n.startswith(f"kpf-{net.run_id}-")], str(result)


def test_cleanup_keeps_the_owner_file_of_a_live_run_still_making_its_network() -> None:
    # Another run's cleanup may come between a run writing its owner file and making its namespaces: had
    # it removed the file, the next cleanup would take that run's network for a dead run's and kill it.
    run_id = f"t{secrets.token_hex(4)}"
    owner = OWNERS_DIR / f"{run_id}.pid"
    OWNERS_DIR.mkdir(parents=True, exist_ok=True)
    owner.write_text(f"{os.getpid()}\n")
    try:
        assert kraftpy("faults", "cleanup").code == 0
        assert owner.exists(), "cleanup removed the owner file of a run that is alive"
    finally:
        owner.unlink(missing_ok=True)
