"""Replacing segments with cleaned ones so that a crash at any point leaves a consistent log.

Design notes: docs/on-disk-format.md, section "storage/swap.py".
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from kraftpy.storage import layout
from kraftpy.storage.errors import LogStorageError
from kraftpy.storage.files import fsync_dir, remove_if_exists
from kraftpy.storage.scan import CorruptSegmentError, walk_headers

log = logging.getLogger(__name__)

# A cleaned segment's .txnindex travels with it (the cleaner writes the merged entries, none = no file).
INDEX_SUFFIXES = (layout.INDEX_SUFFIX, layout.TIME_INDEX_SUFFIX, layout.TXN_INDEX_SUFFIX)


def swap_name(base_offset: int, suffix: str) -> str:
    return layout.segment_file_name(base_offset, suffix) + layout.SWAP_SUFFIX


def commit_swap(directory: Path, scratch: Path, base_offset: int) -> None:
    """Step 1: move the complete, fsynced segment files of `base_offset` from `scratch` in as `.swap` files."""
    for suffix in (*INDEX_SUFFIXES, layout.LOG_SUFFIX):
        built = layout.segment_path(scratch, base_offset, suffix)
        if built.exists():
            os.replace(built, directory / swap_name(base_offset, suffix))
    fsync_dir(directory)


def finish_swap(directory: Path, base_offset: int, replaced: list[int]) -> None:
    """Steps 2 and 3: delete the replaced segments (other than `base_offset`), install the swap."""
    for base in sorted(replaced, reverse=True):
        if base == base_offset:
            continue
        for suffix in (layout.LOG_SUFFIX, *INDEX_SUFFIXES):
            remove_if_exists(layout.segment_path(directory, base, suffix))
    for suffix in INDEX_SUFFIXES:
        swap = directory / swap_name(base_offset, suffix)
        target = layout.segment_path(directory, base_offset, suffix)
        if swap.exists():
            os.replace(swap, target)
        else:
            remove_if_exists(target)  # stale: the open rebuilds a missing index
    os.replace(
        directory / swap_name(base_offset, layout.LOG_SUFFIX),
        layout.segment_path(directory, base_offset, layout.LOG_SUFFIX),
    )
    fsync_dir(directory)


def complete_interrupted_swaps(directory: Path) -> bool:
    """Finish every committed swap in `directory`; drop uncommitted index swaps. Returns whether it did anything."""
    changed = False
    log_swap_suffix = layout.LOG_SUFFIX + layout.SWAP_SUFFIX
    for path in sorted(directory.glob("*" + log_swap_suffix)):
        parsed = layout.parse_segment_name(path.name[: -len(layout.SWAP_SUFFIX)])
        if parsed is None:
            continue
        base = parsed[0]
        last_offset = _last_offset(path)
        replaced = []
        for other in directory.glob("*" + layout.LOG_SUFFIX):
            named = layout.parse_segment_name(other.name)
            if named is not None and base < named[0] <= last_offset:
                replaced.append(named[0])
        log.warning("%s: completing an interrupted cleaner swap of segment %d (replaces %s)", directory, base, replaced)
        finish_swap(directory, base, replaced)
        changed = True
    for path in directory.glob("*" + layout.SWAP_SUFFIX):
        remove_if_exists(path)
        changed = True
    return changed


def _last_offset(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        last = -1
        for span in walk_headers(fd, 0, os.fstat(fd).st_size):
            last = span.last_offset
        return last
    except CorruptSegmentError as exc:
        # The swap was fsynced before it was committed; damage here is a disk fault.
        raise LogStorageError(f"committed cleaner swap {path} is corrupt: {exc.message}") from exc
    finally:
        os.close(fd)
