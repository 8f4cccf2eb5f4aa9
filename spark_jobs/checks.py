"""The audit's checks as Spark DataFrame operations; each returns findings in one shape, FINDING_COLUMNS.

Inputs are the data source's records, the replicas' checkpoint rows (read on the driver) and, for the
history checks, small DataFrames of the workload's sends. Every check is a
pure DataFrame expression; nothing is collected here, so the audit runs all
of them as one Spark job and collects the union once.

The committed bound of a partition is the smallest high watermark any of its
replicas checkpointed: below it every replica must hold the same records
(Kafka's guarantee), above it replicas may legitimately differ (an old
leader's uncommitted tail, not yet truncated).
"""

from __future__ import annotations

import re

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from kraftpy.spark_jobs.replicas import METADATA_TOPIC

FINDING_COLUMNS = ("kind", "topic", "partition", "nodes", "offset", "file", "position", "detail")
KINDS = ("corrupt", "crc", "divergence", "gap", "offset_order", "epoch_lineage", "lost_write", "duplicate")
# read_info's prefix for a leader-epoch checkpoint whose entries go back: a lineage finding, not damage.
LINEAGE_PREFIX = "epoch lineage: "


def _s(col: Column | str) -> Column:
    """A column as text, '-' for null (concat would turn the whole text null)."""
    c = F.col(col) if isinstance(col, str) else col
    return F.coalesce(c.cast("string"), F.lit("-"))


def _text(template: str, **columns: Column) -> Column:
    """A message column from a template: `{name}` is the keyword argument `name`, else the column `name`."""
    parts = re.split(r"\{(\w+)\}", template)
    return F.concat(*[_s(columns.get(p, F.col(p))) if i % 2 else F.lit(p) for i, p in enumerate(parts) if p or i % 2])


def _shape(
    df: DataFrame,
    kind: str,
    detail: Column,
    *,
    nodes: Column | None = None,
    offset: Column | None = None,
    file: Column | None = None,
    position: Column | None = None,
) -> DataFrame:
    nodes, offset, file, position = (F.lit(None) if c is None else c for c in (nodes, offset, file, position))
    return df.select(
        F.lit(kind).alias("kind"),
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        nodes.cast("string").alias("nodes"),
        offset.cast("long").alias("offset"),
        file.cast("string").alias("file"),
        position.cast("long").alias("position"),
        detail.alias("detail"),
    )


def _in_file(df: DataFrame, kind: str, detail: Column, offset: Column) -> DataFrame:
    """A finding about one replica at a place in one of its segment files."""
    return _shape(df, kind, detail, nodes=F.col("node"), offset=offset, file=F.col("file"), position=F.col("position"))


def sound(records: DataFrame) -> DataFrame:
    """The record rows (not the damage rows)."""
    return records.where(F.col("problem").isNull())


def bounds(replicas: DataFrame) -> DataFrame:
    """Per partition: the committed bound, the highest log start, the replica count, whether compacted."""
    return replicas.groupBy("topic", "partition").agg(
        F.min(F.coalesce("high_watermark", F.lit(0))).alias("committed"),
        F.max("log_start_offset").alias("start"),
        F.count(F.lit(1)).alias("replica_count"),
        F.max(F.col("compacted").cast("int")).alias("compacted"),
    )


def damage(records: DataFrame, replicas: DataFrame) -> DataFrame:
    """Unreadable batches and files (corrupt), bad checkpoints (corrupt or epoch_lineage), bad CRCs (crc)."""
    unreadable = _shape(
        records.where(F.col("problem").isNotNull()),
        "corrupt",
        F.col("problem"),
        nodes=F.col("node"),
        file=F.col("file"),
        position=F.col("position"),
    )
    bad = replicas.where(F.col("problem").isNotNull()).withColumn("p", F.explode(F.split("problem", "; ")))
    checkpoints = _shape(
        bad,
        "corrupt",
        F.col("p"),
        nodes=F.col("node"),
        file=F.col("path"),
    ).withColumn("kind", F.when(F.col("detail").startswith(LINEAGE_PREFIX), "epoch_lineage").otherwise("corrupt"))
    crc_batches = (
        sound(records)
        .where(~F.col("crc_ok"))
        .groupBy("node", "topic", "partition", "batch_base_offset", "batch_last_offset", "file", "position")
        .count()
    )
    crc = _in_file(
        crc_batches,
        "crc",
        _text("batch of offsets {batch_base_offset}-{batch_last_offset}: CRC32C does not match"),
        F.col("batch_base_offset"),
    )
    return unreadable.unionByName(checkpoints).unionByName(crc)


def _content() -> Column:
    """What must be equal on every replica at one offset: the batch's epoch and producer fields, the record.

    A Raft log's batches carry the appending node's own clock (raft/shell/durable_log.py), so a voter's
    timestamps are its own: the entry (epoch, kind, bytes) is what the voters must agree on."""
    timestamp = F.when(F.col("topic") == METADATA_TOPIC, F.lit(None)).otherwise(F.col("timestamp"))
    return F.concat_ws(
        "/",
        *[
            _s(c)
            for c in (
                "leader_epoch",
                "producer_id",
                "producer_epoch",
                "sequence",
                timestamp,
                "key_hash",
                "value_hash",
            )
        ],
    )


def divergence(records: DataFrame, replicas: DataFrame) -> DataFrame:
    """Offsets below the committed bound that differ between replicas, or are missing on one."""
    below = (
        sound(records)
        .join(bounds(replicas), ["topic", "partition"])
        .where((F.col("offset") < F.col("committed")) & (F.col("offset") >= F.col("start")))
        .withColumn("content", _content())
    )
    per_offset = below.groupBy("topic", "partition", "offset", "committed", "compacted").agg(
        F.countDistinct("content").alias("versions"),
        F.array_sort(F.collect_set(F.struct("node", "leader_epoch", "value_preview", "content"))).alias("copies"),
        F.array_sort(F.collect_set("node")).alias("holders"),
    )
    copies = F.concat_ws(
        "; ",
        F.transform(
            "copies",
            lambda c: F.concat(
                F.lit("node "), _s(c["node"]), F.lit(" epoch "), _s(c["leader_epoch"]), F.lit(" value "),
                _s(c["value_preview"]),
            ),
        ),
    )  # fmt: skip
    differ = _shape(
        per_offset.where(F.col("versions") > 1),
        "divergence",
        _text("replicas differ below the committed bound {committed}: {copies}", copies=copies),
        nodes=F.array_join("holders", ","),
        offset=F.col("offset"),
    )
    owners = replicas.select("topic", "partition", F.col("node").alias("owner"), "log_start_offset")
    missing_rows = (
        per_offset.where(F.col("compacted") == 0)
        .join(owners, ["topic", "partition"])
        .where((F.col("log_start_offset") <= F.col("offset")) & ~F.array_contains("holders", F.col("owner")))
    )
    missing = _shape(
        missing_rows,
        "divergence",
        _text(
            "offset below the committed bound {committed} is missing on node {owner} (held by nodes {holders})",
            holders=F.array_join("holders", ","),
        ),
        nodes=F.col("owner"),
        offset=F.col("offset"),
    )
    return differ.unionByName(missing)


def gaps(records: DataFrame, replicas: DataFrame) -> DataFrame:
    """Within one replica: offsets skipped (compacted topics excepted) or repeated/going back."""
    flags = replicas.select("node", "topic", "partition", "compacted")
    w = Window.partitionBy("node", "topic", "partition").orderBy("offset", "position")
    seq = sound(records).withColumn("prev", F.lag("offset").over(w)).join(flags, ["node", "topic", "partition"])
    skipped = _in_file(
        seq.where((F.col("offset") > F.col("prev") + 1) & ~F.col("compacted")),
        "gap",
        _text("offsets {first}-{last} are missing", first=F.col("prev") + 1, last=F.col("offset") - 1),
        F.col("prev") + 1,
    )
    repeated = _in_file(
        seq.where(F.col("offset") <= F.col("prev")),
        "offset_order",
        _text("offset {offset} follows offset {prev}"),
        F.col("offset"),
    )
    return skipped.unionByName(repeated)


BATCH_COLUMNS = (
    "node",
    "topic",
    "partition",
    "batch_base_offset",
    "leader_epoch",
    "checkpoint_epoch",
    "file",
    "position",
)


def lineage(records: DataFrame) -> DataFrame:
    """Within one replica: a batch's leader epoch below the previous batch's, or unlike the checkpoint's."""
    batches = sound(records).where(F.col("leader_epoch") >= 0).select(*BATCH_COLUMNS).distinct()
    w = Window.partitionBy("node", "topic", "partition").orderBy("batch_base_offset")
    stepped = batches.withColumn("prev_epoch", F.lag("leader_epoch").over(w))
    back = _in_file(
        stepped.where(F.col("leader_epoch") < F.col("prev_epoch")),
        "epoch_lineage",
        _text("leader epoch {leader_epoch} after epoch {prev_epoch} (epochs must not go back)"),
        F.col("batch_base_offset"),
    )
    # One finding per run of batches the checkpoint gets wrong the same way (one lost entry can cover thousands).
    wrong = (
        batches.where(F.col("checkpoint_epoch") != F.col("leader_epoch"))
        .groupBy("node", "topic", "partition", "leader_epoch", "checkpoint_epoch", "file")
        .agg(
            F.min("batch_base_offset").alias("batch_base_offset"),
            F.max("batch_base_offset").alias("last_base"),
            F.count(F.lit(1)).alias("batches"),
            F.min("position").alias("position"),
        )
    )
    unlike = _in_file(
        wrong,
        "epoch_lineage",
        _text(
            "{batches} batch(es) from offset {batch_base_offset} to {last_base} say leader epoch {leader_epoch}, "
            "the leader-epoch checkpoint says {checkpoint_epoch}"
        ),
        F.col("batch_base_offset"),
    )
    return back.unionByName(unlike)


def lost_writes(records: DataFrame, replicas: DataFrame, acked: DataFrame, topic: str) -> DataFrame:
    """Acknowledged (partition, offset, value) absent or different where a replica says it is committed.

    `acked` has partition, offset, value_hash, value_preview. A replica whose own
    high watermark is past the offset must hold the value there; and some
    replica must hold it, whatever the high watermarks say. Offsets below a
    replica's log start offset were deleted by retention, not lost.
    """
    reps = replicas.where(F.col("topic") == topic).select("node", "partition", "high_watermark", "log_start_offset")
    recs = sound(records).where(F.col("topic") == topic)
    found = recs.select(
        "node", "partition", "offset", F.col("value_hash").alias("found_hash"),
        F.col("value_preview").alias("found_preview"),
    )  # fmt: skip
    claimed = (
        acked.join(reps, "partition")
        .where(
            (F.col("offset") < F.coalesce("high_watermark", F.lit(0))) & (F.col("offset") >= F.col("log_start_offset"))
        )
        .join(found, ["node", "partition", "offset"], "left")
        .where(F.col("found_hash").isNull() | (F.col("found_hash") != F.col("value_hash")))
        .withColumn("topic", F.lit(topic))
    )
    on_replica = _shape(
        claimed,
        "lost_write",
        F.when(
            F.col("found_preview").isNull() & F.col("found_hash").isNull(),
            _text("acknowledged value {value_preview} is absent though the high watermark {high_watermark} is past it"),
        ).otherwise(_text("acknowledged value {value_preview} was replaced by {found_preview}")),
        nodes=F.col("node"),
        offset=F.col("offset"),
    )  # fmt: skip
    held = recs.select("partition", "offset", "value_hash").distinct()
    kept_from = reps.groupBy("partition").agg(F.min("log_start_offset").alias("kept_from"))
    missing = (
        acked.join(kept_from, "partition", "left")
        .where(F.col("offset") >= F.coalesce("kept_from", F.lit(0)))
        .join(held, ["partition", "offset", "value_hash"], "left_anti")
        .withColumn("topic", F.lit(topic))
    )
    nowhere = _shape(
        missing,
        "lost_write",
        _text("acknowledged value {value_preview} is on no replica at its offset"),
        offset=F.col("offset"),
    )
    return on_replica.unionByName(nowhere)


def duplicates(records: DataFrame, replicas: DataFrame, sent: DataFrame, topic: str) -> DataFrame:
    """A value the workload sent once found at two offsets of one replica's committed prefix."""
    reps = replicas.where(F.col("topic") == topic).select("node", "partition", "high_watermark")
    committed = (
        sound(records)
        .where(F.col("topic") == topic)
        .join(reps, ["node", "partition"])
        .where(F.col("offset") < F.coalesce("high_watermark", F.lit(0)))
        .join(sent, ["partition", "value_hash"], "left_semi")
    )
    repeated = (
        committed.groupBy("topic", "node", "partition", "value_hash")
        .agg(F.array_sort(F.collect_set("offset")).alias("offsets"), F.first("value_preview").alias("preview"))
        .where(F.size("offsets") > 1)
    )
    return _shape(
        repeated,
        "duplicate",
        _text(
            "value {preview} is at offsets {offsets}", offsets=F.array_join(F.col("offsets").cast("array<string>"), ",")
        ),
        nodes=F.col("node"),
        offset=F.col("offsets")[1],
    )


def all_findings(
    records: DataFrame,
    replicas: DataFrame,
    *,
    acked: DataFrame | None = None,
    sent: DataFrame | None = None,
    topic: str | None = None,
) -> DataFrame:
    found = (
        damage(records, replicas)
        .unionByName(divergence(records, replicas))
        .unionByName(gaps(records, replicas))
        .unionByName(lineage(records))
    )
    if topic is not None and acked is not None:
        found = found.unionByName(lost_writes(records, replicas, acked, topic))
    if topic is not None and sent is not None:
        found = found.unionByName(duplicates(records, replicas, sent, topic))
    return found


def summary(records: DataFrame, replicas: DataFrame) -> DataFrame:
    """Per replica: records read, the offset range, and its checkpoints; for the report's table."""
    counts = (
        sound(records)
        .groupBy("node", "topic", "partition")
        .agg(F.count(F.lit(1)).alias("records"), F.min("offset").alias("first"), F.max("offset").alias("last"))
    )
    return replicas.join(counts, ["node", "topic", "partition"], "left").select(
        "topic", "partition", "node", "high_watermark", "log_start_offset",
        F.coalesce("records", F.lit(0)).alias("records"), "first", "last",
    )  # fmt: skip
