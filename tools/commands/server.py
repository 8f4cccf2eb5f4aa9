"""`kraftpy server` (run one node) and `kraftpy storage format|random-uuid`, as KRaft has them."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import click

from kraftpy.node import meta_properties
from kraftpy.node.config import NodeConfig, load_config
from kraftpy.protocol.credentials import NODE_FILE
from kraftpy.protocol.errors import KafkaError
from kraftpy.protocol.shell.credential_files import create_cluster_secrets

_SETTING_FLAGS = [
    ("--node-id", "node_id", int),
    ("--roles", "process_roles", str),
    ("--host", "host", str),
    ("--port", "port", int),
    ("--voters", "controller_quorum_voters", str),
    ("--data-dir", "data_dir", str),
    ("--rack", "rack", str),
    ("--log-level", "log_level", str),
    ("--log-file", "log_file", str),
]


def setting_options(func: Any) -> Any:
    for flag, dest, kind in reversed(_SETTING_FLAGS):
        func = click.option(flag, dest, type=kind, default=None, help=f"Overrides `{dest}` from the config.")(func)
    func = click.option(
        "--set",
        "extra_settings",
        multiple=True,
        metavar="KEY=VALUE",
        help="Any other setting, e.g. --set broker_session_timeout_ms=3000.",
    )(func)
    return click.option(
        "--config", "config_path", type=click.Path(dir_okay=False, path_type=Path), help="Node config (TOML)."
    )(func)


def config_from_flags(config_path: Path | None, extra_settings: tuple[str, ...], **flags: Any) -> NodeConfig:
    overrides = dict(flags)
    for item in extra_settings:
        key, eq, value = item.partition("=")
        if not eq:
            raise click.BadParameter(f"--set {item!r} is not KEY=VALUE")
        overrides[key.strip()] = value.strip()
    try:
        return load_config(config_path, overrides)
    except KafkaError as err:
        raise click.ClickException(str(err)) from None


def configure_logging(config: NodeConfig) -> None:
    handler: logging.Handler = (
        logging.FileHandler(config.log_file) if config.log_file else logging.StreamHandler(sys.stderr)
    )
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [node %(node)s] %(name)s: %(message)s"))
    handler.addFilter(_NodeIdFilter(config.node_id))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(config.log_level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


class _NodeIdFilter(logging.Filter):
    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id

    def filter(self, record: logging.LogRecord) -> bool:
        record.node = self.node_id
        return True


@click.command("server")
@setting_options
def server(config_path: Path | None, extra_settings: tuple[str, ...], **flags: Any) -> None:
    """Run one node (broker, controller, or both) until SIGTERM or SIGINT."""
    from kraftpy.node.process import Node
    from kraftpy.node.start_errors import start_error_line

    config = config_from_flags(config_path, extra_settings, **flags)
    configure_logging(config)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # uvloop is optional; asyncio's loop works, only slower
        pass

    async def main() -> None:
        await Node(config).run()

    try:
        asyncio.run(main())
    except Exception as err:
        line = start_error_line(err, config.data_dir)
        if line is None:
            raise  # not a known cause: a bug, keep the traceback
        logging.getLogger(__name__).debug("the node stopped at start", exc_info=True)
        raise click.ClickException(line) from None


@click.group("storage")
def storage() -> None:
    """Format data directories (KRaft's kafka-storage)."""


@storage.command("random-uuid")
def random_uuid() -> None:
    """Print a new cluster id."""
    click.echo(meta_properties.random_cluster_id())


@storage.command("format")
@setting_options
@click.option("--cluster-id", "-t", required=True, help="The cluster id (see `storage random-uuid`).")
@click.option("--ignore-formatted", is_flag=True, help="Succeed when the dir is already formatted the same way.")
def format_storage(
    config_path: Path | None, extra_settings: tuple[str, ...], cluster_id: str, ignore_formatted: bool, **flags: Any
) -> None:
    """Write meta.properties (cluster id, node id) into the node's data dir; create secrets_dir's credentials."""
    config = config_from_flags(config_path, extra_settings, **flags)
    if not cluster_id or any(c.isspace() for c in cluster_id):
        raise click.BadParameter("cluster id must be non-empty and contain no spaces", param_hint="--cluster-id")
    meta = meta_properties.MetaProperties(cluster_id, config.node_id)
    try:
        wrote = meta_properties.write(config.data_dir, meta, ignore_formatted=ignore_formatted)
    except KafkaError as err:
        raise click.ClickException(str(err)) from None
    click.echo(f"{'Formatted' if wrote else 'Already formatted'} {config.data_dir} for cluster {cluster_id}")
    if config.secrets_dir is None:
        click.echo("Warning: secrets_dir is not set; the node will not start without it (docs/security.md)", err=True)
    elif not (config.secrets_dir / NODE_FILE).exists():
        create_cluster_secrets(config.secrets_dir)
        click.echo(
            f"Created the cluster's credentials in {config.secrets_dir} (mode 0600): copy this directory to every "
            "node of the cluster; admin commands use its admin.credential (--credential)"
        )
