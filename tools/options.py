"""Options shared by every client command: where the cluster is, and the credential for admin operations.

`--dir` names a cluster started by `kraftpy cluster start` (its cluster.json
says where the nodes listen); `--bootstrap-server` names servers directly and
wins over `--dir`. Admin operations (docs/security.md) are signed with
`--credential FILE`, else $KRAFTPY_CREDENTIAL, else the cluster dir's
`secrets/admin.credential` when there is one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from kraftpy.protocol.credentials import ADMIN_FILE
from kraftpy.protocol.errors import KafkaError
from kraftpy.tools.cluster_layout import SECRETS_DIR, bootstrap_from, rpc_servers_from

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_DIR = ".kraftpy"
DIR_ENV = "KRAFTPY_DIR"
CREDENTIAL_ENV = "KRAFTPY_CREDENTIAL"
_CREDENTIAL_META = "kraftpy.credential"


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


def _credential_callback(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    ctx.meta[_CREDENTIAL_META] = value


def client_options(func: F) -> F:
    """Add --dir, --bootstrap-server and --credential to a command."""
    func = click.option(
        "--credential",
        type=click.Path(dir_okay=False, path_type=Path),
        envvar=CREDENTIAL_ENV,
        expose_value=False,
        callback=_credential_callback,
        help=f"Credential file for admin operations (${CREDENTIAL_ENV}; default: DIR/secrets/admin.credential).",
    )(func)
    func = click.option(
        "--bootstrap-server",
        "bootstrap_servers",
        metavar="HOST:PORT[,...]",
        callback=_bootstrap_callback,
        help="Kafka bootstrap servers of any Kafka-compatible cluster; wins over --dir.",
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


def rpc_servers_for(cluster_dir: Path, servers: list[tuple[str, int]] | None) -> list[tuple[str, int]]:
    """The nodes' RPC addresses (see `rpc_servers_from`); a bad --dir is `Error: CODE: ...`, exit 1."""
    try:
        return rpc_servers_from(cluster_dir, servers)
    except KafkaError as exc:
        raise click.ClickException(str(exc)) from None


def credential_path() -> Path | None:
    """The credential file the running command signs admin requests with, if any (see the module doc)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return None
    explicit = ctx.meta.get(_CREDENTIAL_META)
    if explicit is not None:
        return Path(explicit)
    cluster_dir = ctx.params.get("cluster_dir") or default_cluster_dir()
    found = Path(cluster_dir) / SECRETS_DIR / ADMIN_FILE
    return found if found.exists() else None


def quiet_client_logs() -> None:
    """A command reports its own outcome in one line; the client's retry warnings would bury it."""
    logging.getLogger("kraftpy.client").setLevel(logging.ERROR)
