"""The package list in pyproject.toml covers every package folder, and the CLI starts."""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.conftest import REPO_ROOT


def test_every_package_folder_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    mapping = config["package-dir"]
    found = set()
    for package, folder in mapping.items():
        for init in (REPO_ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO_ROOT / folder)
            found.add(".".join([package, *rel.parts]))
    assert found - listed == set(), "folders with __init__.py missing from [tool.setuptools].packages"
    assert listed - found == set(), "packages listed without a folder"


def test_no_test_files_inside_mapped_folders() -> None:
    mapping = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    strays = [str(p) for folder in mapping.values() for p in (REPO_ROOT / folder).rglob("test_*.py")]
    assert strays == []


def test_cli_version_and_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.startswith("kraftpy, version ")
    helped = subprocess.run(
        [sys.executable, "-m", "kraftpy.tools.cli", "--help"], capture_output=True, text=True, check=True
    )
    for name in ("log",):
        assert name in helped.stdout
