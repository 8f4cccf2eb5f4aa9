"""House rule 1 for raft/: the core does no I/O, reads no clock and draws no randomness of
its own (all of it comes in through inputs and the injected random source)."""

from __future__ import annotations

import ast

from tests.conftest import REPO_ROOT

FORBIDDEN_IMPORTS = {"asyncio", "socket", "time", "datetime", "os", "threading", "aiohttp", "lmdb", "subprocess"}
FORBIDDEN_CALLS = {"open", "print", "input"}
# The asyncio shell around the core (issue 3, "Durability" and "Transport and process shell"):
# named one by one, so every other module in raft/, and any new one, is held to the rule.
SHELL_MODULES = {
    "durable_log.py",
    "quorum_state_file.py",
    "snapshot_store.py",
    "transport.py",
    "peer_client.py",
    "shell.py",
    "component.py",
}


def _modules():
    return sorted((REPO_ROOT / "raft").glob("*.py"))


def _core_modules():
    return [p for p in _modules() if p.name not in SHELL_MODULES]


def test_core_modules_import_no_io_clock_or_global_randomness() -> None:
    offenders = []
    for path in _core_modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
                if node.module == "random":
                    offenders.append(f"{path.name}: from random import ...")
            else:
                names = set()
            offenders += [f"{path.name}: import {n}" for n in names & FORBIDDEN_IMPORTS]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                offenders.append(f"{path.name}:{node.lineno}: {node.func.id}()")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "random"
                and node.func.attr != "Random"
            ):
                offenders.append(f"{path.name}:{node.lineno}: random.{node.func.attr}() (module-level generator)")
    assert offenders == []


def test_every_core_module_has_a_docstring() -> None:
    assert [p.name for p in _modules() if not ast.get_docstring(ast.parse(p.read_text()))] == []
