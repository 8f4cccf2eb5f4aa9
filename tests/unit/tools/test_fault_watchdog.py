"""A fault run frozen where none of its own timeouts can act is ended by its watchdog (tools/faults/watchdog.py).

Seed 2102 (session 22) stood still for minutes: librdkafka's consumer close waited inside a rebalance
callback that confluent-kafka runs holding the GIL, so no thread of the run ran Python meanwhile. Here a
"run" blocks in a C call that holds the GIL (ctypes.PyDLL), with a "node" beside it: the watchdog must
dump the run's threads, kill both and say so.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from kraftpy.tools.cluster_layout import ClusterLayout, NodeEntry
from kraftpy.tools.faults import watchdog

FROZEN_RUN = textwrap.dedent(
    """
    import ctypes, sys, threading, time
    from pathlib import Path
    from kraftpy.tools.faults import watchdog

    dump = watchdog.arm_dump(Path(sys.argv[1]))
    threading.Thread(target=time.sleep, args=(3600,), name="a-worker-with-its-own-timeout").start()
    print("frozen", flush=True)
    ctypes.PyDLL(None).sleep(3600)  # a C call that keeps the GIL: no Python thread runs again
    """
)


def fake_node(out_dir: Path, node_id: int) -> subprocess.Popen[bytes]:
    """A process the cluster layout takes for node `node_id`'s server: its command line names the config."""
    layout = ClusterLayout(out_dir / "cluster", "c", (NodeEntry(node_id, "127.0.0.1", 19092, ("broker",)),))
    layout.save()
    node = layout.nodes[0]
    layout.node_dir(node).mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", str(layout.config_path(node))])
    layout.pid_path(node).write_text(f"{proc.pid}\n")
    return proc


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_frozen_run_is_dumped_and_stopped_with_its_nodes(tmp_path: Path) -> None:
    node = fake_node(tmp_path, 1)
    run = subprocess.Popen([sys.executable, "-c", FROZEN_RUN, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert run.stdout is not None and run.stdout.readline() == "frozen\n"
        guard = subprocess.run(
            [sys.executable, "-m", "kraftpy.tools.faults.watchdog", str(run.pid), "0.5", str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert guard.returncode == watchdog.EXIT_FIRED, guard.stderr
        run.wait(timeout=30)
        node.wait(timeout=30)
        assert run.returncode == -9 and node.returncode == -9
        assert f"killed node pid {node.pid}" in guard.stderr and "still running 0.5 s" in guard.stderr
        threads = (tmp_path / watchdog.HUNG_THREADS).read_text()
        assert "Thread 0x" in threads, threads  # the worker too: every thread is dumped
        assert 'File "<string>", line 9' in threads  # the frozen C call's frame, where a person starts reading
    finally:
        for proc in (run, node):
            proc.kill()
            proc.wait()


def test_a_run_that_ends_by_itself_ends_its_watchdog(tmp_path: Path) -> None:
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        # Not fired: with a wrong liveness test it would wait out the deadline, then fire (EXIT_FIRED).
        assert watchdog.watch(run.pid, 120.0, tmp_path, poll_s=0.05) == 0
        assert _gone(run.pid)
        assert not (tmp_path / watchdog.HUNG_THREADS).exists()
    finally:
        run.kill()
        run.wait()


def test_a_killed_run_leaves_no_node_behind(tmp_path: Path) -> None:
    node = fake_node(tmp_path, 2)
    run = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    try:
        run.kill()  # as `kill -9` would: no finally of the run's runs
        assert watchdog.watch(run.pid, 120.0, tmp_path, poll_s=0.05) == 0
        node.wait(timeout=30)
        assert node.returncode == -9
    finally:
        for proc in (run, node):
            proc.kill()
            proc.wait()


def test_a_pid_file_naming_another_process_spares_it(tmp_path: Path) -> None:
    node = fake_node(tmp_path, 3)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    (tmp_path / "cluster" / "node-3" / "server.pid").write_text(f"{bystander.pid}\n")  # the node's pid, reused
    try:
        assert not any(line.startswith("killed") for line in watchdog.stop_what_the_run_left(tmp_path))
        assert bystander.poll() is None
    finally:
        for proc in (node, bystander):
            proc.kill()
            proc.wait()


def test_the_dump_file_is_removed_when_nothing_was_dumped(tmp_path: Path) -> None:
    dump = watchdog.arm_dump(tmp_path)
    watchdog.disarm_dump(dump)
    assert not (tmp_path / watchdog.HUNG_THREADS).exists()
