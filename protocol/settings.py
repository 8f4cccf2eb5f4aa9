"""Reading a component's settings from a node config: the one rule every `from_node_config` follows.

A component declares its settings once, as a dataclass with Kafka's names
(snake_case) and defaults. The node config (kraftpy.node.config) holds
the settings a user wrote: its own fields as attributes, and any other
component's in `extra`. `settings_from(config, cls)` picks out the ones `cls`
declares; the rest keep the component's defaults. Where another class offers
the same setting (the node config, a shell's settings), its default is
`default_of(cls, name)`, never a second literal.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def settings_from(config: Any, cls: type, *, skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The values of `cls`'s fields that `config` names (as an attribute or in its `extra` mapping)."""
    extra = getattr(config, "extra", None) or {}
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        if f.name in extra:
            values[f.name] = extra[f.name]
        elif hasattr(config, f.name):
            values[f.name] = getattr(config, f.name)
    return values


def default_of(cls: type, name: str) -> Any:
    """The default `cls` (a dataclass) declares for its field `name`; for declaring it once."""
    for f in dataclasses.fields(cls):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise LookupError(f"{cls.__name__} declares no default for {name!r}")
