"""Names of the files in a partition directory, and of the directory itself.

One place knows the naming so the log, recovery, the cleaner and `kraftpy log
dump` agree: `<topic>-<partition>/` holding `<base_offset:020d>.log`, `.index`,
`.timeindex` and the checkpoint files.
"""

from __future__ import annotations

import re
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
# The aborted-transactions index (storage/txn_index.py); not in SEGMENT_SUFFIXES: `log dump` reads those.
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

# The cleaner writes a replacement segment as *.cleaned, renames it to *.swap
# once complete (the commit point), then to the final name.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TEMP_SUFFIX = ".tmp"
# Where the cleaner builds replacement segments before moving them in as *.cleaned.
CLEANER_SCRATCH_DIR = ".cleaner"

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
HIGH_WATERMARK_CHECKPOINT = "high-watermark-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CHECKPOINT_NAMES = (
    LEADER_EPOCH_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    HIGH_WATERMARK_CHECKPOINT,
    CLEANER_OFFSET_CHECKPOINT,
)

_SEGMENT_NAME = re.compile(r"^(\d{20})(\.log|\.index|\.timeindex)$")
_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    return directory / segment_file_name(base_offset, suffix)


def parse_segment_name(name: str) -> tuple[int, str] | None:
    """'00000000000000000042.log' -> (42, '.log'); None for anything else."""
    match = _SEGMENT_NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), match.group(2)


def partition_dir_name(topic: str, partition: int) -> str:
    if not topic or "/" in topic or topic in (".", ".."):
        raise ValueError(f"topic name {topic!r} cannot name a directory")
    if partition < 0:
        raise ValueError(f"partition {partition} is negative")
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """'orders-3' -> ('orders', 3): the partition is after the last dash, as Kafka reads it."""
    match = _PARTITION_DIR.match(name)
    if match is None:
        return None
    return match.group(1), int(match.group(2))
