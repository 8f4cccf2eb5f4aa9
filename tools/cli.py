"""The `kraftpy` command line: one click group, subcommands loaded on first use.

Each subcommand lives in its own module; COMMANDS maps its name to
"module:attribute", so `kraftpy --help` starts fast and adding a command is
one line here.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version

import click

COMMANDS: dict[str, tuple[str, str]] = {
    # name: ("module:attribute", one-line help shown by `kraftpy --help`)
    "audit": ("kraftpy.tools.commands.audit:audit", "Audit every replica's segment files with PySpark."),
    "check": ("kraftpy.tools.commands.check:check", "Check a history for linearizability or Kafka anomalies."),
    "cluster": ("kraftpy.tools.commands.cluster:cluster", "Start, inspect and stop a local cluster."),
    "configs": ("kraftpy.tools.commands.configs:configs", "Describe, set and delete topic and broker configs."),
    "consume": ("kraftpy.tools.commands.consume:consume", "Print records of a topic."),
    "faults": ("kraftpy.tools.commands.faults:faults", "Run a workload under real network faults and check it."),
    "groups": ("kraftpy.tools.commands.groups:groups", "List, describe, reset offsets of and delete consumer groups."),
    "log": ("kraftpy.tools.commands.log:log", "Inspect segment, index and checkpoint files."),
    "perf": ("kraftpy.tools.commands.perf:perf", "Measure produce/consume throughput, latency and failover."),
    "produce": ("kraftpy.tools.commands.produce:produce", "Send lines from stdin to a topic."),
    "quorum": ("kraftpy.tools.commands.quorum:quorum", "Inspect the metadata quorum."),
    "server": ("kraftpy.tools.commands.server:server", "Run one node (broker, controller, or both)."),
    "storage": ("kraftpy.tools.commands.server:storage", "Format data directories; make cluster ids."),
    "topics": ("kraftpy.tools.commands.topics:topics", "Create, list, describe, alter and delete topics."),
    "transactions": ("kraftpy.tools.commands.transactions:transactions", "List and describe transactions."),
}


def kraftpy_version() -> str:
    try:
        return version("kraftpy")
    except PackageNotFoundError:  # running from a tree that was never installed
        return "0+unknown"


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when they are invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        module_name, attr = entry[0].split(":")
        return getattr(importlib.import_module(module_name), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(kraftpy_version(), "--version", "-V", prog_name="kraftpy")
def main() -> None:
    """kraftpy: a Kafka-style commit log on its own Raft quorum."""


if __name__ == "__main__":
    main()
