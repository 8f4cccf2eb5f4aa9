"""The group cores are sans-I/O: no I/O, clock, threads or global randomness in broker/groups or client cores."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO_ROOT

FORBIDDEN_IMPORTS = {"asyncio", "socket", "time", "datetime", "os", "threading", "aiohttp", "subprocess", "lmdb"}
FORBIDDEN_CALLS = {"open", "print", "input"}
CLIENT_CORES = [
    "consumer_protocol.py",
    "group_membership.py",
    "group_membership_types.py",
    "group_heartbeat.py",
    "group_commits.py",
    "group_subscription.py",
    "group_protocol.py",
    "group_errors.py",
    "group_offsets_reset.py",
    "rebalance_listener.py",
]


def core_modules() -> list[Path]:
    paths = sorted((REPO_ROOT / "broker" / "groups").glob("*.py"))
    paths += sorted((REPO_ROOT / "client" / "assignors").glob("*.py"))
    paths += [REPO_ROOT / "client" / name for name in CLIENT_CORES]
    return paths


def test_group_cores_do_no_io_read_no_clock_and_draw_no_global_randomness() -> None:
    offenders = []
    for path in core_modules():
        for node in ast.walk(ast.parse(path.read_text())):
            names: set[str] = set()
            if isinstance(node, ast.Import):
                names = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                names = {(node.module or "").split(".")[0]}
            offenders += [f"{path.name}: import {n}" for n in names & FORBIDDEN_IMPORTS]
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FORBIDDEN_CALLS:
                offenders.append(f"{path.name}:{node.lineno}: {node.func.id}()")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("random", "uuid")
                and node.func.attr not in ("Random", "UUID")
            ):
                offenders.append(f"{path.name}:{node.lineno}: {node.func.value.id}.{node.func.attr}()")
    assert offenders == []


def test_every_group_core_module_has_a_docstring() -> None:
    assert [p.name for p in core_modules() if not ast.get_docstring(ast.parse(p.read_text()))] == []
