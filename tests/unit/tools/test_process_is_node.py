"""`process_is_node` while a node's process execs: it is the node throughout, never "gone".

A node in a network namespace is spawned as `ip netns exec NS python ... --config PATH`, which execs the
server in place; during each exec (and right after the spawn) /proc/PID/cmdline reads empty for a
moment. Before, that moment read as "the node is not running": `ip netns exec` nodes looked dead
to whoever polled then (found by test_fault_disk_full_start.py failing one run in six).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from kraftpy.tools.cluster_layout import process_is_node

EXECS = 300  # each a /bin/sh exec of about a millisecond: hundreds of windows to fall into

CHAIN = """n=$1; shift
if [ "$n" -gt 0 ]; then exec /bin/sh "$0" $((n - 1)) "$@"; fi
sleep 0.2
"""


def test_a_process_that_execs_again_and_again_is_the_node_throughout(tmp_path: Path) -> None:
    config, script = tmp_path / "node.toml", tmp_path / "chain.sh"
    script.write_text(CHAIN)
    proc = subprocess.Popen(["/bin/sh", str(script), str(EXECS), "--config", str(config)])
    checks, missed = 0, 0
    try:
        while True:
            seen = process_is_node(proc.pid, config)
            if proc.poll() is not None:  # ended (and reaped): a False now may be the end itself
                break
            checks += 1
            missed += not seen
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0
    assert checks > EXECS // 10, checks  # the loop did look, all along the chain
    assert missed == 0, f"{missed} of {checks} looks took the exec'ing process for gone"


def test_a_process_of_another_config_or_gone_is_not_the_node(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    other = tmp_path / "other.toml"
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 5", "sh", "--config", str(other)])
    try:
        assert process_is_node(proc.pid, other)
        assert not process_is_node(proc.pid, config)
    finally:
        proc.kill()
        proc.wait()
    assert not process_is_node(proc.pid, other)  # reaped: no such process
