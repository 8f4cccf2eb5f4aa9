"""The one line `kraftpy server` prints when a node cannot start: what failed, where, what to do.

Issue 11 §9: a damaged LMDB store surfaced as a raw MDB_CORRUPTED traceback,
and a full disk as "cannot serve on 127.0.0.1:PORT: [Errno 28]" (every OSError
was taken for a listen error). Here each known cause gets its own line, naming
the file or directory; an error this does not know is a bug and keeps its
traceback (None).
"""

from __future__ import annotations

import errno
from pathlib import Path

import lmdb

from kraftpy.protocol.errors import KafkaError

NO_SPACE = frozenset({errno.ENOSPC, errno.EDQUOT})


class ListenError(Exception):
    """The node's port could not be bound (raised by the node with the address it tried)."""

    def __init__(self, host: str, port: int, cause: OSError) -> None:
        self.host, self.port, self.cause = host, port, cause
        what = cause.strerror or str(cause)
        super().__init__(
            f"cannot listen on {host}:{port}: {what}; stop whatever holds that address or give the node "
            "another `host`/`port` (and update `controller_quorum_voters` if it is a controller)"
        )


def start_error_line(exc: BaseException, data_dir: Path | str) -> str | None:
    """One line for an error that stopped the node at start, or None when it is not a known cause."""
    if isinstance(exc, ListenError):
        return str(exc)
    if isinstance(exc, KafkaError):
        return str(exc)
    if isinstance(exc, OSError) and exc.errno in NO_SPACE:
        where = exc.filename or data_dir
        return (
            f"no space left on the device holding {where} ({exc.strerror}): free space there or move "
            f"data_dir ({data_dir}) to a larger disk, then start the node again"
        )
    if isinstance(exc, lmdb.Error):
        return f"an LMDB store under {data_dir} failed: {type(exc).__name__}: {exc}"
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.strerror or exc}: {exc.filename}; check that path (permissions, mount), then start again"
    return None
