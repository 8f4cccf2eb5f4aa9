"""A fault run's bound in time, kept from outside the run's process.

    python -m kraftpy.tools.faults.watchdog RUN_PID DEADLINE_S OUT_DIR

A client library can freeze a whole run where none of its timeouts can act (librdkafka's consumer
close inside a rebalance callback that confluent-kafka runs holding the GIL). If the run is still
alive at the deadline, this process has it dump its threads into OUT_DIR/hung-threads.txt, kills it
and its nodes, releases its disk and namespaces, and exits 3; if the run is killed, it stops what
the run left. The run stops it once its cluster is stopped. Docs: docs/jepsen.md, "A run".
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TextIO

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.cluster_layout import ClusterLayout
from kraftpy.tools.faults.netns import cleanup_stale, pid_alive

HUNG_THREADS = "hung-threads.txt"
DUMP_SIGNAL = signal.SIGUSR2
DUMP_WAIT_S = 2.0  # for faulthandler to write the dump before the SIGKILL
POLL_S = 1.0
EXIT_FIRED = 3


def arm_dump(out_dir: Path) -> TextIO:
    """In the run: dump every thread's stack into OUT_DIR/hung-threads.txt on DUMP_SIGNAL. Returns the open
    file, which stays open until `disarm_dump`."""
    dump = (out_dir / HUNG_THREADS).open("w")
    faulthandler.register(DUMP_SIGNAL, file=dump, all_threads=True)
    return dump


def disarm_dump(dump: TextIO) -> None:
    """The run ended by itself: no dump any more, and no empty file left behind."""
    faulthandler.unregister(DUMP_SIGNAL)
    dump.close()
    path = Path(dump.name)
    if path.stat().st_size == 0:
        path.unlink()


def start(deadline_s: float, out_dir: Path) -> subprocess.Popen[bytes]:
    """In the run: the watchdog of this process, in a session of its own (a Ctrl-C of the run spares it)."""
    return subprocess.Popen(
        [sys.executable, "-m", "kraftpy.tools.faults.watchdog", str(os.getpid()), str(deadline_s), str(out_dir)],
        start_new_session=True,
    )


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def stop_what_the_run_left(out_dir: Path) -> list[str]:
    """The cluster's nodes, the small disks and the run's network namespaces; what was done, in words."""
    done = []
    with contextlib.suppress(KafkaError):  # no cluster.json: the run stopped before it made its cluster
        layout = ClusterLayout.load(out_dir / "cluster")
        for node in layout.nodes:
            pid = layout.read_pid(node)  # None unless that node's own server: a reused pid is spared
            if pid is not None:
                _kill(pid)
                done.append(f"killed node pid {pid}")
            if os.path.ismount(layout.data_dir(node)):
                subprocess.run(["umount", "-l", str(layout.data_dir(node))], capture_output=True, timeout=30)
                done.append(f"unmounted {layout.data_dir(node)}")
    with contextlib.suppress(Exception):  # no namespaces here (loopback), or no `ip`: nothing to remove
        done += [f"removed namespace {name}" for name in cleanup_stale()]
    return done


def _died(run_pid: int, out_dir: Path) -> int:
    """The run is gone without having stopped its watchdog, which it does once its cluster is stopped: it
    was killed (a SIGKILL, an out-of-memory kill), so what it started is left; stop that."""
    done = stop_what_the_run_left(out_dir)
    if done:
        print(f"fault run (pid {run_pid}) died: {'; '.join(done)}", file=sys.stderr, flush=True)
    return 0


def watch(run_pid: int, deadline_s: float, out_dir: Path, *, poll_s: float = POLL_S) -> int:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if not pid_alive(run_pid):
            return _died(run_pid, out_dir)
        time.sleep(min(poll_s, max(0.0, end - time.monotonic())))
    if not pid_alive(run_pid):
        return _died(run_pid, out_dir)
    with contextlib.suppress(ProcessLookupError):
        os.kill(run_pid, DUMP_SIGNAL)
    time.sleep(DUMP_WAIT_S)
    _kill(run_pid)
    for _ in range(50):  # the namespaces are removed only once their owner is gone
        if not pid_alive(run_pid):
            break
        time.sleep(0.1)
    done = stop_what_the_run_left(out_dir)
    print(
        f"fault run (pid {run_pid}) still running {deadline_s:g} s after its start: stopped it "
        f"(its threads: {out_dir / HUNG_THREADS}); {'; '.join(done) or 'nothing else was left'}",
        file=sys.stderr,
        flush=True,
    )
    return EXIT_FIRED


def main(argv: list[str]) -> int:
    run_pid, deadline_s, out_dir = int(argv[0]), float(argv[1]), Path(argv[2])
    return watch(run_pid, deadline_s, out_dir)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
