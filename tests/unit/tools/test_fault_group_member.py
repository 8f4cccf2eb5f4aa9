"""The `groups` workload's member process stops on its own when the run that started it is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_member_whose_run_died_stops_polling() -> None:
    # bash starts the member (no server at that address: it polls nothing, forever) and exits.
    member = f"{sys.executable} -m kraftpy.tools.faults.workloads.group_member 127.0.0.1:1 t g >/dev/null 2>&1"
    shell = subprocess.run(["bash", "-c", f"{member} & echo $!; sleep 4"], capture_output=True, text=True, timeout=60)
    pid = int(shell.stdout.split()[0])
    try:
        deadline = time.monotonic() + 30
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(pid), "the member kept polling after its run was gone"
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
