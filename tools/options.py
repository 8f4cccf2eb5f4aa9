"""Options shared by every client command: where the cluster is.

`--dir` names a cluster started by `kraftpy cluster start` (its cluster.json
says where the nodes listen); `--bootstrap-server` names servers directly and
wins over `--dir`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.cluster_layout import bootstrap_from

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DIR = ".kraftpy"
DIR_ENV = "KRAFTPY_DIR"


def default_cluster_dir() -> Path:
    return Path(os.environ.get(DIR_ENV) or DEFAULT_DIR)


def parse_bootstrap_servers(value: str) -> list[tuple[str, int]]:
    """'h1:p1,h2:p2' -> [(h1, p1), (h2, p2)], with a readable error for anything else."""
    servers: list[tuple[str, int]] = []
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, port_text = item.rpartition(":")
        if not sep or not host:
            raise click.BadParameter(f"{item!r} is not HOST:PORT")
        try:
            port = int(port_text)
        except ValueError:
            raise click.BadParameter(f"port {port_text!r} in {item!r} is not a number") from None
        if not 0 < port < 65536:
            raise click.BadParameter(f"port {port} in {item!r} is out of range 1-65535")
        servers.append((host.strip("[]"), port))
    if not servers:
        raise click.BadParameter("no HOST:PORT given")
    return servers


def _bootstrap_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    return None if value is None else parse_bootstrap_servers(value)


def client_options(func: F) -> F:
    """Add --dir and --bootstrap-server to a command."""
    func = click.option(
        "--bootstrap-server",
        "bootstrap_servers",
        metavar="HOST:PORT[,...]",
        callback=_bootstrap_callback,
        help="Servers to contact; wins over --dir.",
    )(func)
    func = click.option(
        "--dir",
        "cluster_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=default_cluster_dir,
        show_default=f"${DIR_ENV}, else ./{DEFAULT_DIR}",
        help="Directory of a cluster started by `kraftpy cluster start`.",
    )(func)
    return func


def servers_for(cluster_dir: Path, bootstrap_servers: list[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """The servers a client command contacts (see `bootstrap_from`); a bad --dir is `Error: CODE: ...`, exit 1."""
    try:
        return bootstrap_from(cluster_dir, bootstrap_servers)
    except KafkaError as exc:
        raise click.ClickException(str(exc)) from None


def quiet_client_logs() -> None:
    """A command reports its own outcome in one line; the client's retry warnings would bury it."""
    logging.getLogger("kraftpy.client").setLevel(logging.ERROR)
