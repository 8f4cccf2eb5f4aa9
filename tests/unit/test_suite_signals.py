"""The processes a test starts handle Ctrl-C, however the run was started (tests/conftest.py)."""

from __future__ import annotations

import signal
import subprocess
import sys

from tests.conftest import REPO_ROOT

CHECK = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"


def test_a_process_a_test_starts_gets_pythons_ctrl_c_handling() -> None:
    out = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "True", out


def test_so_too_in_a_run_started_with_sigint_ignored() -> None:
    # As `nohup python -m pytest ... &` from a non-interactive shell starts it: SIGINT ignored from the start.
    nested = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         f"{__file__}::test_a_process_a_test_starts_gets_pythons_ctrl_c_handling"],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    assert nested.returncode == 0, nested.stdout[-3000:] + nested.stderr[-2000:]
