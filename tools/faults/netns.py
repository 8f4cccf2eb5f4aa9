"""The network of a fault run (a thin shell): one namespace per node, a client namespace, a bridge.

    kpf-<run>-br   the bridge `br0` (no address), one veth `v<id>` per member
    kpf-<run>-n<i> node i: `eth0` = 10.207.N.(10+i)/24, the peer of `v<i>`
    kpf-<run>-c    the clients: `eth0` = 10.207.N.2/24

Where namespaces cannot be made (`supported()` says why), `LoopbackNet` stands in: every node on an
address of 127.0.0.0/8 of its own, no partitions (the run refuses partition nemeses).

Veths are made inside the bridge namespace, so the root namespace never sees a link, route or
rule of the run; 10.207.N.0/24 overlaps no root address. A run's owner pid is in
/run/kraftpy-faults/<run>.pid: `cleanup_stale()` (called by `setup()`) removes runs whose owner is gone.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kraftpy.tools.faults.partitions import CLIENT, Drops, nft_scripts

PREFIX = "kpf-"
NETWORKS = ("auto", "netns", "loopback")  # `--network`: auto is netns where the machine can, else loopback
OWNERS_DIR = Path("/run/kraftpy-faults")
NET_BASE = ipaddress.ip_network("10.207.0.0/16")
CMD_TIMEOUT_S = 20


class NetError(RuntimeError):
    """The machine cannot make the run's network (no root, no `ip` or `nft`)."""


def run_cmd(args: Sequence[str], *, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(args), input=stdin, capture_output=True, text=True, timeout=CMD_TIMEOUT_S)
    if check and proc.returncode != 0:
        raise NetError(f"`{' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def list_namespaces() -> list[str]:
    out = run_cmd(["ip", "netns", "list"], check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _root_networks() -> list[ipaddress.IPv4Network]:
    out = run_cmd(["ip", "-o", "-4", "addr"], check=False).stdout
    nets = []
    for line in out.splitlines():
        fields = line.split()
        if "inet" in fields:
            nets.append(ipaddress.ip_interface(fields[fields.index("inet") + 1]).network)
    return nets


def choose_subnet(run_id: str, taken: Sequence[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """A /24 of 10.207.0.0/16 that overlaps nothing taken, picked from the run id (so parallel runs differ)."""
    start = int.from_bytes(hashlib.sha256(run_id.encode()).digest()[:2], "big") % 256
    for k in range(256):
        subnet = ipaddress.ip_network(f"10.207.{(start + k) % 256}.0/24")
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise NetError(f"every /24 of {NET_BASE} overlaps an address of this machine")


def pid_alive(pid: int) -> bool:
    """Whether the process runs; a zombie (dead, not yet reaped by its parent) does not."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def _owner_alive(owner: Path) -> bool:
    try:
        return pid_alive(int(owner.read_text().strip()))
    except (FileNotFoundError, ValueError):
        return False


def _kill_namespace(name: str) -> None:
    """SIGKILL what still runs inside (a namespace outlives its name while a process holds it), then delete."""
    pids = run_cmd(["ip", "netns", "pids", name], check=False).stdout.split()
    for pid in pids:
        if pid == str(os.getpid()):  # the run itself, which works from inside its client namespace
            continue
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run_cmd(["ip", "netns", "del", name], check=False)


def run_of(namespace: str) -> str | None:
    if not namespace.startswith(PREFIX):
        return None
    return namespace[len(PREFIX) :].rsplit("-", 1)[0]


def cleanup_stale(*, everything: bool = False) -> list[str]:
    """Remove the namespaces of runs whose owner process is gone (all of the runs' with `everything`)."""
    removed = []
    for name in list_namespaces():
        run = run_of(name)
        if run is None:
            continue
        owner = OWNERS_DIR / f"{run}.pid"
        try:
            pid = int(owner.read_text().strip())
        except (FileNotFoundError, ValueError):
            pid = None
        if everything or pid is None or not pid_alive(pid):
            _kill_namespace(name)
            removed.append(name)
    for owner in OWNERS_DIR.glob("*.pid") if OWNERS_DIR.is_dir() else ():
        # A live owner without namespaces is a run making them right now: its file must stay, or the
        # next cleanup would take its network for a dead run's and kill the run inside it.
        if not any(run_of(n) == owner.stem for n in list_namespaces()) and not _owner_alive(owner):
            owner.unlink(missing_ok=True)
    return removed


def supported() -> tuple[bool, str]:
    """Whether this machine can make the run's network: root, `ip`, `nft`."""
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return False, f"the `{tool}` tool is not installed (apt-get install iproute2 nftables)"
    if os.geteuid() != 0:
        return False, "network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    return True, "network namespaces, veth pairs, a bridge, nftables"


@dataclass
class FaultNet:
    """The run's network: `setup()` makes it (idempotent), `teardown()` removes all of it."""

    run_id: str
    node_ids: tuple[int, ...]
    subnet: ipaddress.IPv4Network | None = None
    kind = "netns"

    @property
    def bridge_ns(self) -> str:
        return f"{PREFIX}{self.run_id}-br"

    def namespace(self, node: int) -> str:
        return f"{PREFIX}{self.run_id}-c" if node == CLIENT else f"{PREFIX}{self.run_id}-n{node}"

    @property
    def members(self) -> tuple[int, ...]:
        return (CLIENT, *self.node_ids)

    def address(self, node: int) -> str:
        assert self.subnet is not None, "setup() first"
        return str(self.subnet.network_address + (2 if node == CLIENT else 10 + node))

    @property
    def addresses(self) -> dict[int, str]:
        return {m: self.address(m) for m in self.members}

    def namespaces(self) -> list[str]:
        return [self.bridge_ns, *(self.namespace(m) for m in self.members)]

    def setup(self) -> None:
        ok, why = supported()
        if not ok:
            raise NetError(why)
        if "-" in self.run_id or len(self.run_id) > 12:
            raise NetError(f"run id {self.run_id!r}: at most 12 characters, no '-'")
        cleanup_stale()
        OWNERS_DIR.mkdir(parents=True, exist_ok=True)
        (OWNERS_DIR / f"{self.run_id}.pid").write_text(f"{os.getpid()}\n")
        for name in self.namespaces():  # idempotent: a half-made network of this run starts again
            _kill_namespace(name)
        if self.subnet is None:
            self.subnet = choose_subnet(self.run_id, _root_networks())
        try:
            self._make()
        except BaseException:
            self.teardown()
            raise

    def _make(self) -> None:
        br = self.bridge_ns
        for name in self.namespaces():
            run_cmd(["ip", "netns", "add", name])
            run_cmd(["ip", "-n", name, "link", "set", "lo", "up"])
        run_cmd(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        run_cmd(["ip", "-n", br, "link", "set", "br0", "up"])
        for member in self.members:
            ns, veth = self.namespace(member), f"v{member}"
            run_cmd(["ip", "-n", br, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            run_cmd(["ip", "-n", br, "link", "set", veth, "master", "br0", "up"])
            run_cmd(["ip", "-n", ns, "addr", "add", f"{self.address(member)}/{self.subnet.prefixlen}", "dev", "eth0"])
            run_cmd(["ip", "-n", ns, "link", "set", "eth0", "up"])

    def exec_prefix(self, node: int) -> list[str]:
        """Prefix a command line with this to run it in `node`'s namespace (CLIENT: the clients')."""
        return ["ip", "netns", "exec", self.namespace(node)]

    def apply(self, drops: Drops) -> None:
        """Make `drops` the run's partition (replacing the previous one); an empty set heals."""
        for member, script in nft_scripts(drops, self.addresses).items():
            run_cmd(["ip", "netns", "exec", self.namespace(member), "nft", "-f", "-"], stdin=script)

    def heal(self) -> None:
        self.apply(frozenset())

    def teardown(self) -> None:
        for name in self.namespaces():
            _kill_namespace(name)
        (OWNERS_DIR / f"{self.run_id}.pid").unlink(missing_ok=True)


def loopback_subnet(run_id: str) -> ipaddress.IPv4Network:
    """A /24 of 127.0.0.0/8 picked from the run id (parallel runs differ; 127.0.0.0/24 is left to others)."""
    digest = hashlib.sha256(run_id.encode()).digest()
    return ipaddress.ip_network(f"127.{1 + digest[0] % 254}.{digest[1]}.0/24")


@dataclass
class LoopbackNet:
    """The fallback network: no namespaces, each node on its own loopback address; partitions cannot be made."""

    run_id: str
    node_ids: tuple[int, ...]
    subnet: ipaddress.IPv4Network | None = None
    kind = "loopback"

    @property
    def members(self) -> tuple[int, ...]:
        return (CLIENT, *self.node_ids)

    def namespace(self, node: int) -> str:
        return ""  # the caller's own

    def namespaces(self) -> list[str]:
        return []

    def address(self, node: int) -> str:
        assert self.subnet is not None, "setup() first"
        return str(self.subnet.network_address + (2 if node == CLIENT else 10 + node))

    @property
    def addresses(self) -> dict[int, str]:
        return {m: self.address(m) for m in self.members}

    def setup(self) -> None:
        self.subnet = self.subnet or loopback_subnet(self.run_id)

    def apply(self, drops: Drops) -> None:
        if drops:
            raise NetError("partitions need network namespaces; this run is in loopback mode")

    def heal(self) -> None:
        """Nothing to heal: loopback mode makes no partition."""

    def teardown(self) -> None:
        """Nothing to remove: loopback mode makes no namespace."""


def choose_network(asked: str) -> tuple[str, str]:
    """`--network` -> (the network the run uses, why). auto: netns where `supported()`, else loopback;
    netns where it is not supported: NetError (CI asks for netns, so a machine without it fails loudly)."""
    if asked not in NETWORKS:
        raise ValueError(f"unknown network {asked!r}; known: {', '.join(NETWORKS)}")
    if asked == "loopback":
        return "loopback", "asked for (--network loopback)"
    ok, why = supported()
    if ok:
        return "netns", why
    if asked == "netns":
        raise NetError(f"network namespaces cannot be made here: {why}")
    return "loopback", f"network namespaces cannot be made here ({why})"


CLONE_NEWNET = 0x40000000


def enter_namespace(name: str) -> None:
    """Move the calling thread (call it before any other thread starts) into namespace `name`; every socket
    and child process made afterwards lives there. Python 3.11 has no os.setns, hence libc's."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise NetError(f"setns({name}): {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
