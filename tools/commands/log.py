"""`kraftpy log`: inspect a partition's files without a broker (like kafka-dump-log).

Design notes: docs/user-guide.md, section "tools/commands/log.py".
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from kraftpy.protocol.records.record import Record
from kraftpy.storage import layout
from kraftpy.storage.inspection import (
    BatchEntry,
    IndexFileReader,
    LogFileReader,
    Problem,
    files_of_directory,
    is_checkpoint,
    read_checkpoint_file,
)
from kraftpy.storage.verify import Report, log_bytes_of, partition_directories
from kraftpy.storage.verify import verify as verify_data_dir

ROWS_PER_TABLE = 500  # a 1 GiB segment has a million batches: print as we go


@click.group()
def log() -> None:
    """Inspect segment, index and checkpoint files."""


@log.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch (or entry) per line.")
@click.option("--print-records", is_flag=True, help="Also print each batch's records.")
def dump(paths: tuple[Path, ...], as_json: bool, print_records: bool) -> None:
    """Dump .log, .index, .timeindex and checkpoint files (a directory: all of them).

    With --json each batch is one line with the keys base_offset, last_offset,
    leader_epoch, producer_id, producer_epoch, base_sequence, count,
    compression, crc_valid, position, size (and records with --print-records).
    When more than one file is dumped, a {"file": PATH} line precedes each.
    Exits 1 if anything is corrupt.
    """
    files: list[Path] = []
    for path in paths:
        files.extend(files_of_directory(path) if path.is_dir() else [path])
    # Piped output is read by people too (less, CI logs): do not squeeze it into 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    failed = False
    for path in files:
        if as_json and len(files) > 1:
            _emit({"file": str(path)})
        elif not as_json:
            console.print(f"[bold]Dumping {escape(str(path))}[/bold]")
        problem = _dump_file(path, as_json, print_records, console)
        if problem is not None:
            failed = True
            err.print(f"[red]error:[/red] {escape(str(path))}: {escape(problem.message)}")
    if failed:
        sys.exit(1)


def _dump_file(path: Path, as_json: bool, print_records: bool, console: Console) -> Problem | None:
    if is_checkpoint(path):
        return _dump_checkpoint(path, as_json, console)
    parsed = layout.parse_segment_name(path.name)
    if parsed is not None and parsed[1] != layout.LOG_SUFFIX:
        return _dump_index(path, as_json, console)
    if path.suffix != layout.LOG_SUFFIX:
        return Problem(None, "not a .log, .index, .timeindex or checkpoint file")
    return _dump_log(path, as_json, print_records, console)


# -- .log ---------------------------------------------------------------------------------


def batch_json(entry: BatchEntry, print_records: bool, metadata: bool = False) -> dict[str, Any]:
    h = entry.header
    out: dict[str, Any] = {
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "leader_epoch": h.partition_leader_epoch,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "count": h.records_count,
        "compression": entry.compression,
        "crc_valid": entry.crc_valid,
        "position": entry.position,
        "size": h.size,
    }
    if print_records:
        out["records"] = None if entry.records is None else [record_json(r, metadata) for r in entry.records]
    return out


def _text_or_b64(name: str, data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {name: None}
    try:
        return {name: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {f"{name}_b64": base64.b64encode(data).decode("ascii")}


METADATA_LOG_PREFIX = "__cluster_metadata"


def is_metadata_log(path: Path) -> bool:
    return path.parent.name.startswith(METADATA_LOG_PREFIX)


def metadata_records(record: Record) -> list[Any] | None:
    """The metadata records a Raft data entry holds (None for control records or undecodable bytes)."""
    from kraftpy.metadata.records import decode_entry

    if record.key is not None or not record.value:
        return None
    try:
        return decode_entry(record.value)
    except Exception:  # a value that is not a metadata entry is shown as bytes, as any other
        return None


def metadata_record_json(record: Any) -> dict[str, Any]:
    fields = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
    return {"type": type(record).__name__, **json.loads(json.dumps(fields, default=str))}


def metadata_record_text(record: Any) -> str:
    fields = ", ".join(f"{f.name}={getattr(record, f.name)}" for f in dataclasses.fields(record))
    return f"{type(record).__name__}({fields})"


def record_json(record: Record, metadata: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"offset": record.offset, "timestamp": record.timestamp}
    out.update(_text_or_b64("key", record.key))
    decoded = metadata_records(record) if metadata else None
    if decoded is not None:
        out["metadata_records"] = [metadata_record_json(r) for r in decoded]
    else:
        out.update(_text_or_b64("value", record.value))
    out["headers"] = [{"key": k, **_text_or_b64("value", v)} for k, v in record.headers]
    return out


def _dump_log(path: Path, as_json: bool, print_records: bool, console: Console) -> Problem | None:
    reader = LogFileReader(path, with_records=print_records)
    metadata = is_metadata_log(path)
    table = None
    count = 0
    for entry in reader:
        count += 1
        if as_json:
            _emit(batch_json(entry, print_records, metadata))
            continue
        if print_records:
            _print_batch_with_records(entry, console, metadata)
            continue
        if table is None:
            table = _batch_table()
        _add_batch_row(table, entry)
        if table.row_count >= ROWS_PER_TABLE:
            console.print(table)
            table = None
    if table is not None:
        console.print(table)
    if not as_json:
        console.print(f"{count} batch(es)" + ("" if reader.problem is None else ", [red]corrupt[/red]"))
    return reader.problem


def _batch_table() -> Table:
    table = Table(show_edge=False, pad_edge=False)
    names = ("position", "offsets", "count", "epoch", "pid/pepoch/seq", "codec", "base ts", "max ts", "size", "crc")
    for name in names:
        table.add_column(name, justify="left" if name in ("codec", "crc") else "right", no_wrap=True)
    return table


def _add_batch_row(table: Table, entry: BatchEntry) -> None:
    h = entry.header
    flags = (" control" if h.is_control else "") + (" txn" if h.is_transactional else "")
    table.add_row(
        str(entry.position),
        f"{h.base_offset}..{h.last_offset}",
        str(h.records_count),
        str(h.partition_leader_epoch),
        f"{h.producer_id}/{h.producer_epoch}/{h.base_sequence}",
        entry.compression + flags,
        str(h.base_timestamp),
        str(h.max_timestamp),
        str(h.size),
        "ok" if entry.crc_valid else "[red]BAD[/red]",
    )


def _print_batch_with_records(entry: BatchEntry, console: Console, metadata: bool = False) -> None:
    table = _batch_table()
    _add_batch_row(table, entry)
    console.print(table)
    if entry.records is None:
        console.print("  [red](records not readable)[/red]")
        return
    records = Table(show_edge=False, pad_edge=False, box=None)
    for name in ("  offset", "timestamp", "key", "value", "headers"):
        records.add_column(name)
    for r in entry.records:
        j = record_json(r)
        key = j.get("key", "base64:" + j.get("key_b64", ""))
        value = j.get("value", "base64:" + j.get("value_b64", ""))
        decoded = metadata_records(r) if metadata else None
        # Whole: a metadata record is what the reader came for.
        value = _short(value) if decoded is None else "; ".join(metadata_record_text(m) for m in decoded)
        records.add_row(f"  {r.offset}", str(r.timestamp), _short(key), value, str(len(r.headers)))
    console.print(records, markup=False)


def _short(value: object, limit: int = 60) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- indexes and checkpoints ------------------------------------------------------------------


def _dump_index(path: Path, as_json: bool, console: Console) -> Problem | None:
    reader = IndexFileReader(path)
    time_index = reader.suffix == layout.TIME_INDEX_SUFFIX
    table = Table(show_edge=False, pad_edge=False)
    for name in ("timestamp", "offset") if time_index else ("offset", "position"):
        table.add_column(name, justify="right")
    table.add_column("check")
    count = 0
    for entry in reader:
        count += 1
        if as_json:
            out: dict[str, Any] = (
                {"timestamp": entry.timestamp, "offset": entry.offset}
                if time_index
                else {"offset": entry.offset, "position": entry.position}
            )
            if entry.error is not None:
                out["error"] = entry.error
            _emit(out)
            continue
        first, second = (entry.timestamp, entry.offset) if time_index else (entry.offset, entry.position)
        table.add_row(str(first), str(second), "ok" if entry.error is None else f"[red]{escape(entry.error)}[/red]")
    if not as_json:
        if count:
            console.print(table)
        console.print(f"{count} entr{'y' if count == 1 else 'ies'}")
    return reader.problem


def _dump_checkpoint(path: Path, as_json: bool, console: Console) -> Problem | None:
    entries, problem = read_checkpoint_file(path)
    if as_json:
        _emit({"entries": [list(e) for e in entries]})
    else:
        for entry in entries:
            console.print(" ".join(str(v) for v in entry))
    return problem


# -- verify -------------------------------------------------------------------------------------

# Below this much log data a check takes a moment: no progress bar.
PROGRESS_MIN_BYTES = 64 * 1024 * 1024


@log.command()
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the counts and every problem.")
def verify(data_dir: Path, as_json: bool) -> None:
    """Check every batch CRC, batch framing, index entry and checkpoint of a node's data directory.

    DATA_DIR is a node's data_dir (its partitions and the metadata log) or one
    partition directory. Exits 0 with a summary when everything is sound;
    exits 1 naming each bad file and the byte position of the damage (the
    first one first). Reads only; for a clean answer stop the node first.
    """
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    directories = partition_directories(data_dir)
    if not directories:
        raise click.ClickException(f"{data_dir} holds no partition directories (is it a node's data_dir?)")
    total = log_bytes_of(directories)
    report = Report()
    with Progress(console=err, transient=True, disable=total < PROGRESS_MIN_BYTES or as_json) as progress:
        task = progress.add_task("verifying", total=total)
        for directory in verify_data_dir(data_dir, report, lambda n: progress.advance(task, n)):
            progress.update(task, description=f"verifying {directory.name}")
    summary = {
        "partitions": report.partitions,
        "segments": report.segments,
        "batches": report.batches,
        "log_bytes": report.log_bytes,
        "index_entries": report.index_entries,
        "checkpoints": report.checkpoints,
        "problems": [{"file": str(p.path), "position": p.position, "message": p.message} for p in report.problems],
    }
    if as_json:
        _emit(summary)
    else:
        click.echo(
            f"{report.partitions} partition(s), {report.segments} segment(s), {report.batches} batch(es) "
            f"({report.log_bytes} bytes), {report.index_entries} index entries, {report.checkpoints} checkpoint(s): "
            + (f"{len(report.problems)} problem(s)" if report.problems else "all sound")
        )
    for problem in report.problems:
        err.print(f"[red]error:[/red] {escape(str(problem))}")
    if report.problems:
        sys.exit(1)


def _emit(obj: dict[str, Any]) -> None:
    click.echo(json.dumps(obj, separators=(",", ":")))
