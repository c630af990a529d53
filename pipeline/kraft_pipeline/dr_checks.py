"""`dr_checks`: could this cluster be rebuilt from these disks? Each check is pass or fail, with the
evidence a person needs to act on it (which node, file, offset).

Per cluster:
- `log_agreement`: every node's copy of each committed batch has the same bytes. A batch counts
  as committed when a majority of the nodes whose logs were read hold one identical copy of it
  (raft's commit rule seen from the disks); a node holding other bytes there, or a corrupt batch,
  fails the check.
- `segment_continuity` (per node): the node's segments hold every offset from their start to
  their end, and offsets below the log start are covered by one of the node's snapshots.
- `snapshot_matches_log` (per node): replaying the node's log from its previous snapshot (or from
  offset 0) up to each snapshot's end offset gives that snapshot's image, compared as the records
  `MetadataImage` writes. The replay is the engine's own MetadataLoader.
- `snapshot_age`: the newest snapshot's last contained log time against the newest batch, within
  Kafka's `metadata.log.max.snapshot.interval.ms` default (one hour).
- `voter_set_history`: every VotersRecord in order; each change adds or removes at most one voter,
  as KIP-853 requires.
- `rebuildable_from`: which nodes' disks reach the committed end through an unbroken chain of a
  snapshot and valid batches, and to which offset.
"""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.loader import MetadataLoader
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import decode_metadata_record

__all__ = ["CHECK_SCHEMA", "dr_checks"]

SNAPSHOT_INTERVAL_MS_MAX = 3_600_000
CHECK_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string()),
        pa.field("check", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("status", pa.string()),
        pa.field("evidence", pa.string()),
        pa.field("value", pa.int64()),  # the figure the check is about (an offset, an age), if any
    ]
)
_PASS, _FAIL = "pass", "fail"


def _check(
    cluster_id: str, check: str, *, subject: str, ok: bool, evidence: str, value: int | None = None
) -> dict[str, Any]:
    return {
        "cluster_id": cluster_id,
        "check": check,
        "subject": subject,
        "status": _PASS if ok else _FAIL,
        "evidence": evidence,
        "value": value,
    }


# -- per node: continuity, snapshots against the log, how far the disk rebuilds --------------------


class _NodeLog:
    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.cluster_id: str = rows[0]["cluster_id"]
        self.node_id: int = rows[0]["node_id"]
        # base offset -> batch (last offset, epoch, time, records)
        self.batches: dict[int, dict[str, Any]] = {}
        self.bad_batches: dict[int, str] = {}
        self.snapshots: dict[tuple[int, int], dict[str, Any]] = {}
        for row in sorted(rows, key=lambda r: (r["file"], r["offset"] if r["offset"] is not None else -1)):
            if row["file_kind"] == "snapshot":
                self._snapshot_row(row)
            elif row["file_kind"] == "segment":
                self._segment_row(row)

    def _snapshot_row(self, row: dict[str, Any]) -> None:
        key = (row["snapshot_end_offset"], row["snapshot_epoch"])
        snapshot = self.snapshots.setdefault(key, {"records": [], "problems": [], "time_ms": None})
        if row["problem"] is not None:
            snapshot["problems"].append(row["problem"])
        elif row["record_type"] == "SnapshotHeaderRecord":
            snapshot["time_ms"] = row["snapshot_time_ms"]
        elif not row["is_control"]:
            snapshot["records"].append(row["record_value"])

    def _segment_row(self, row: dict[str, Any]) -> None:
        base = row["batch_base_offset"]
        if row["problem"] is not None:
            if base is not None:
                self.bad_batches[base] = row["problem"]
            else:  # a torn tail or unreadable bytes: where the readable log ends
                self.bad_batches[row["offset"] if row["offset"] is not None else -1] = row["problem"]
            return
        batch = self.batches.setdefault(
            base,
            {
                "last": row["batch_last_offset"],
                "epoch": row["leader_epoch"],
                "time_ms": row["batch_timestamp_ms"],
                "records": [],
            },
        )
        if not row["is_control"] and row["record_value"] is not None:  # None: past every snapshot (dr_checks)
            batch["records"].append(row["record_value"])

    def runs(self) -> list[tuple[int, int]]:
        """The contiguous [first, last] offset ranges the node's valid batches cover."""
        runs: list[tuple[int, int]] = []
        for base in sorted(self.batches):
            last = self.batches[base]["last"]
            if runs and base == runs[-1][1] + 1:
                runs[-1] = (runs[-1][0], last)
            else:
                runs.append((base, last))
        return runs

    def replay(self, start: tuple[int, int] | None, end_offset: int) -> MetadataImage | str:
        """The image after replaying batches up to `end_offset` (exclusive) from snapshot `start`
        (or from offset 0), or why it cannot be done."""
        loader = self._loader(start)
        offset = 0 if start is None else start[0]
        committed = []
        while offset < end_offset:
            batch = self.batches.get(offset)
            if batch is None:
                why = self.bad_batches.get(offset, "no batch there")
                return f"the log has no valid batch at offset {offset} ({why})"
            if batch["last"] >= end_offset:
                return f"the batch at {offset} runs past the snapshot's end {end_offset}"
            committed.append(
                CommittedBatch(
                    base_offset=offset,
                    last_offset=batch["last"],
                    epoch=batch["epoch"],
                    append_timestamp_ms=batch["time_ms"],
                    records=_records(batch["records"]),
                )
            )
            offset = batch["last"] + 1
        try:
            loader.handle_commit(committed)
        except (MetadataReplayError, ValueError) as e:
            return f"replay fails: {e}"
        return loader.image

    def snapshot_image(self, key: tuple[int, int]) -> MetadataImage:
        return self._loader(key).image

    def _loader(self, snapshot_key: tuple[int, int] | None) -> MetadataLoader:
        """A loader holding snapshot `snapshot_key`'s image (an empty one for None)."""
        loader = MetadataLoader()
        if snapshot_key is not None:
            snapshot = self.snapshots[snapshot_key]
            loader.handle_load_snapshot(
                list(_records(snapshot["records"])),
                last_contained_offset=snapshot_key[0] - 1,
                last_contained_epoch=snapshot_key[1],
                last_contained_log_time_ms=snapshot["time_ms"] or 0,
            )
        return loader


def _records(values: list[bytes]) -> tuple[object, ...]:
    """The engine's records of stored record values, decoded only when a replay needs them (the
    decoder read them once already; they decoded then, so they decode now)."""
    return tuple(decode_metadata_record(value)[0] for value in values)


def _image_bytes(image: MetadataImage) -> bytes | str:
    try:
        return image.to_bytes()
    except Exception as e:  # an image that cannot be written (no metadata.version) is evidence too
        return f"cannot write the image: {e}"


def _continuity(node: _NodeLog) -> dict[str, Any]:
    subject = f"node {node.node_id}"
    runs = node.runs()
    problems = [f"offset {o}: {why}" for o, why in sorted(node.bad_batches.items())]
    gaps = [f"offsets {a[1] + 1}..{b[0] - 1} are missing" for a, b in itertools.pairwise(runs)]
    if runs and runs[0][0] > 0 and not any(end >= runs[0][0] for end, _ in node.snapshots):
        gaps.insert(0, f"the log starts at {runs[0][0]} and no snapshot covers the offsets below it")
    if not runs:
        return _check(
            node.cluster_id, "segment_continuity", subject=subject, ok=not problems,
            evidence="no log segments; " + "; ".join(problems),
        )
    evidence = "; ".join(gaps + problems) or f"offsets {runs[0][0]}..{runs[-1][1]} with no gap"
    return _check(
        node.cluster_id, "segment_continuity", subject=subject, ok=not gaps and not problems, evidence=evidence,
        value=runs[-1][1],
    )


def _snapshot_checks(node: _NodeLog) -> list[dict[str, Any]]:
    out = []
    keys = sorted(node.snapshots)
    for index, key in enumerate(keys):
        subject = f"node {node.node_id} snapshot {key[0]:020d}-{key[1]:010d}"
        snapshot = node.snapshots[key]
        if snapshot["problems"]:
            out.append(_check(node.cluster_id, "snapshot_matches_log", subject=subject, ok=False,
                              evidence="; ".join(snapshot["problems"]), value=key[0]))
            continue
        if key[0] == 0:
            continue  # the bootstrap snapshot holds no log offsets
        previous = next((k for k in reversed(keys[:index]) if k[0] > 0 and not node.snapshots[k]["problems"]), None)
        replayed = node.replay(previous, key[0])
        if isinstance(replayed, str) and previous is not None:
            replayed = node.replay(None, key[0])  # the log may still reach back to offset 0
        if isinstance(replayed, str):
            out.append(_check(node.cluster_id, "snapshot_matches_log", subject=subject, ok=False,
                              evidence=f"cannot replay to {key[0]}: {replayed}", value=key[0]))
            continue
        got, want = _image_bytes(replayed), _image_bytes(node.snapshot_image(key))
        same = got == want and isinstance(got, bytes)
        base = "offset 0" if previous is None else f"snapshot {previous[0]}"
        evidence = (
            f"replaying from {base} to {key[0]} gives the snapshot's image"
            if same
            else f"replaying from {base} to {key[0]} gives a different image than the snapshot holds"
        )
        out.append(_check(node.cluster_id, "snapshot_matches_log", subject=subject, ok=same, evidence=evidence, value=key[0]))
    return out


def _rebuild_offset(node: _NodeLog) -> tuple[int, str]:
    """The highest offset this disk alone rebuilds to: from the newest intact snapshot (or offset
    0) along valid batches until the first gap or damaged batch. -1 when it rebuilds nothing."""
    starts = [k for k in sorted(node.snapshots) if not node.snapshots[k]["problems"]]
    best, how = -1, "nothing to rebuild from"
    for start in [None, *starts]:
        offset = 0 if start is None else start[0]
        if start is None and 0 not in node.batches:
            continue
        while offset in node.batches:
            offset = node.batches[offset]["last"] + 1
        if offset - 1 > best:
            best = offset - 1
            how = "the log from offset 0" if start is None else f"snapshot {start[0]} and the log after it"
    return best, how


def _node_fold(table: pa.Table) -> pa.Table:
    rows = table.to_pylist()
    if not rows:
        return pa.Table.from_pylist([], schema=CHECK_SCHEMA)
    node = _NodeLog(rows)
    out = [_continuity(node), *_snapshot_checks(node)]
    rebuilt, how = _rebuild_offset(node)
    out.append(_check(node.cluster_id, "node_rebuild_offset", subject=f"node {node.node_id}", ok=rebuilt >= 0,
                      evidence=how, value=rebuilt))
    return pa.Table.from_pylist(out, schema=CHECK_SCHEMA)


# -- per cluster ---------------------------------------------------------------------------------


def _log_agreement(records: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The agreement check, and each cluster's committed end (the last majority-held offset)."""
    # Each node's batches, one row per batch (a fleet's records are read once for both below).
    batches = (
        records.where(F.col("file_kind") == "segment")
        .select("cluster_id", "node_id", "batch_base_offset", "batch_last_offset", "batch_sha256")
        .distinct()
        .cache()
    )
    copies = batches.where(F.col("batch_sha256").isNotNull())
    nodes = batches.groupBy("cluster_id").agg(F.countDistinct("node_id").alias("nodes"))
    held = copies.groupBy("cluster_id", "batch_base_offset", "batch_last_offset", "batch_sha256").agg(
        F.count("*").alias("holders")
    ).join(nodes, "cluster_id")
    committed = held.where(F.col("holders") * 2 > F.col("nodes")).select(
        "cluster_id", "batch_base_offset", F.col("batch_sha256").alias("committed_sha256"), "batch_last_offset"
    )
    committed_end = committed.groupBy("cluster_id").agg(F.max("batch_last_offset").alias("committed_end"))
    disagreeing = copies.join(committed.drop("batch_last_offset"), ["cluster_id", "batch_base_offset"]).where(
        F.col("batch_sha256") != F.col("committed_sha256")
    )
    evidence = disagreeing.groupBy("cluster_id").agg(
        F.array_join(
            F.sort_array(
                F.collect_list(
                    F.format_string(
                        "node %d holds other bytes for the batch at offset %d (sha256 %s, committed %s)",
                        "node_id", "batch_base_offset", F.substring("batch_sha256", 1, 12), F.substring("committed_sha256", 1, 12),
                    )
                )
            ),
            "; ",
        ).alias("disagreement"),
        F.count("*").alias("bad"),
    )
    counted = committed.groupBy("cluster_id").agg(F.count("*").alias("committed_batches"))
    check = (
        nodes.join(counted, "cluster_id", "left")
        .join(committed_end, "cluster_id", "left")
        .join(evidence, "cluster_id", "left")
        .select(
            "cluster_id",
            F.lit("log_agreement").alias("check"),
            F.lit("all nodes").alias("subject"),
            F.when(F.col("bad").isNull(), F.lit(_PASS)).otherwise(F.lit(_FAIL)).alias("status"),
            F.coalesce(
                "disagreement",
                F.format_string(
                    "%d nodes agree on all %d committed batches (through offset %d)",
                    "nodes", F.coalesce("committed_batches", F.lit(0)), F.coalesce("committed_end", F.lit(-1)),
                ),
            ).alias("evidence"),
            F.col("committed_end").cast("long").alias("value"),
        )
    )
    return check, committed_end


def _rebuildable(node_checks: DataFrame, committed_end: DataFrame) -> DataFrame:
    nodes = node_checks.where(F.col("check") == "node_rebuild_offset").join(committed_end, "cluster_id", "left")
    full = F.col("value") >= F.coalesce("committed_end", F.lit(-1))
    return nodes.groupBy("cluster_id").agg(
        F.sort_array(F.collect_list(F.when(full, F.col("subject")))).alias("able"),
        F.array_join(
            F.sort_array(F.collect_list(F.format_string("%s: to offset %d from %s", "subject", "value", "evidence"))), "; "
        ).alias("detail"),
        F.first("committed_end").alias("committed_end"),
    ).select(
        "cluster_id",
        F.lit("rebuildable_from").alias("check"),
        F.array_join("able", ", ").alias("subject"),
        F.when(F.size("able") > 0, F.lit(_PASS)).otherwise(F.lit(_FAIL)).alias("status"),
        F.format_string("committed end %d; %s", F.coalesce("committed_end", F.lit(-1)), "detail").alias("evidence"),
        F.col("committed_end").cast("long").alias("value"),
    )


def _snapshot_age(records: DataFrame, log: DataFrame) -> DataFrame:
    batch_times = log.groupBy("cluster_id").agg(
        F.max("batch_timestamp_ms").alias("newest_ms"), F.min("batch_timestamp_ms").alias("oldest_ms")
    )
    newest_snapshot = (
        records.where((F.col("file_kind") == "snapshot") & (F.col("record_type") == "SnapshotHeaderRecord"))
        .where(F.col("snapshot_end_offset") > 0)
        .groupBy("cluster_id")
        .agg(
            F.max("record.SnapshotHeaderRecord.last_contained_log_timestamp").alias("snapshot_ms"),
            F.max("snapshot_end_offset").alias("snapshot_end"),
        )
    )
    joined = batch_times.join(newest_snapshot, "cluster_id", "left")
    age = F.col("newest_ms") - F.coalesce("snapshot_ms", "oldest_ms")
    return joined.select(
        "cluster_id",
        F.lit("snapshot_age").alias("check"),
        F.lit("newest snapshot").alias("subject"),
        F.when(age <= SNAPSHOT_INTERVAL_MS_MAX, F.lit(_PASS)).otherwise(F.lit(_FAIL)).alias("status"),
        F.when(
            F.col("snapshot_ms").isNull(),
            F.format_string("no snapshot beyond the bootstrap; the log spans %d ms (limit %d ms)", age, F.lit(SNAPSHOT_INTERVAL_MS_MAX)),
        )
        .otherwise(
            F.format_string(
                "snapshot at offset %d is %d ms older than the newest batch (limit %d ms)",
                "snapshot_end", age, F.lit(SNAPSHOT_INTERVAL_MS_MAX),
            )
        )
        .alias("evidence"),
        age.cast("long").alias("value"),
    )


def _voter_history(table: pa.Table) -> pa.Table:
    rows = sorted(table.to_pylist(), key=lambda r: (r["source"], r["offset"]))
    sets: list[tuple[str, list[int]]] = []
    for row in rows:
        if row["voters"] is None:
            continue  # the row that makes every cluster a group, VotersRecord or not
        voters = sorted(v["voter_id"] for v in row["voters"])
        if not sets or sets[-1][1] != voters:
            sets.append((row["where"], voters))
    bad = [
        f"{sets[i][0]}: {sets[i - 1][1]} -> {sets[i][1]}"
        for i in range(1, len(sets))
        if len(set(sets[i][1]) ^ set(sets[i - 1][1])) > 1
    ]
    history = "; ".join(f"{where}: {voters}" for where, voters in sets)
    evidence = (f"more than one voter changed at once: {'; '.join(bad)}; history: " if bad else "") + (
        history or "no VotersRecord (a static quorum)"
    )
    return pa.Table.from_pylist(
        [_check(rows[0]["cluster_id"], "voter_set_history", subject="voters", ok=not bad, evidence=evidence, value=len(sets))], schema=CHECK_SCHEMA
    )


def _voters(records: DataFrame, log: DataFrame) -> DataFrame:
    # The voter set a snapshot starts from (the earliest snapshot's), then every change in the log.
    in_snapshots = records.where(
        (F.col("file_kind") == "snapshot") & (F.col("record_type") == "VotersRecord") & F.col("problem").isNull()
    )
    earliest = Window.partitionBy("cluster_id").orderBy("snapshot_end_offset", "node_id")
    first = in_snapshots.withColumn("n", F.row_number().over(earliest)).where(F.col("n") == 1).select(
        "cluster_id", F.lit(0).alias("source"), F.col("snapshot_end_offset").alias("offset"),
        F.format_string("snapshot %d", "snapshot_end_offset").alias("where"),
        F.col("record.VotersRecord.voters").alias("voters"),
    )
    changes = log.where(F.col("record_type") == "VotersRecord").select(
        "cluster_id", F.lit(1).alias("source"), "offset", F.format_string("offset %d", "offset").alias("where"),
        F.col("record.VotersRecord.voters").alias("voters"),
    )
    every_cluster = log.select(
        "cluster_id", F.lit(-1).alias("source"), F.lit(-1).cast("long").alias("offset"), F.lit("").alias("where"),
        F.lit(None).cast(changes.schema["voters"].dataType).alias("voters"),
    ).distinct()
    return first.unionByName(changes).unionByName(every_cluster).groupBy("cluster_id").applyInArrow(_voter_history, from_arrow_schema(CHECK_SCHEMA))


def dr_checks(records: DataFrame, log: DataFrame) -> DataFrame:
    """Every check of every cluster in `records` (all rows, problems included)."""
    agreement, committed_end = _log_agreement(records)
    snapshots = records.where(F.col("file_kind") == "snapshot").cache()  # small: read once, used thrice
    # A segment's records matter to the per-node checks only below the node's last snapshot (the
    # replays end there); past it the node's fold needs one row per batch (its offsets, epoch and
    # time), not one per record: those batches are summed up here, not shipped to the Python worker.
    replay_ends = F.broadcast(
        snapshots.groupBy("cluster_id", "node_id").agg(F.max("snapshot_end_offset").alias("replay_end"))
    )
    rows = records.join(replay_ends, ["cluster_id", "node_id"], "left")
    whole = (
        (F.col("file_kind") != "segment") | F.col("problem").isNotNull() | (F.col("offset") < F.col("replay_end"))
    )
    # The typed struct does not go to the Python worker (Spark's Arrow writer pays for each of its
    # ~200 nested fields on every row): the stored bytes do, and the engine decodes them again.
    columns = [
        "cluster_id", "node_id", "file", "file_kind", "snapshot_end_offset", "snapshot_epoch", "offset",
        "batch_base_offset", "batch_last_offset", "leader_epoch", "batch_timestamp_ms", "is_control",
        "record_type", "record_value", "snapshot_time_ms", "problem",
    ]
    full = rows.where(whole).select(
        *columns[:-2],
        F.col("record.SnapshotHeaderRecord.last_contained_log_timestamp").alias("snapshot_time_ms"),
        "problem",
    )
    summed = (
        rows.where(~whole | whole.isNull())
        .groupBy("cluster_id", "node_id", "file", "batch_base_offset")
        .agg(
            F.first("file_kind").alias("file_kind"),
            F.lit(None).cast("long").alias("snapshot_end_offset"),
            F.lit(None).cast("int").alias("snapshot_epoch"),
            F.min("offset").alias("offset"),
            F.first("batch_last_offset").alias("batch_last_offset"),
            F.first("leader_epoch").alias("leader_epoch"),
            F.first("batch_timestamp_ms").alias("batch_timestamp_ms"),
            F.first("is_control").alias("is_control"),
            F.lit(None).cast("string").alias("record_type"),
            F.lit(None).cast("binary").alias("record_value"),
            F.lit(None).cast("long").alias("snapshot_time_ms"),
            F.lit(None).cast("string").alias("problem"),
        )
    )
    per_node = (
        full.unionByName(summed.select(*columns))
        .groupBy("cluster_id", "node_id")
        .applyInArrow(_node_fold, from_arrow_schema(CHECK_SCHEMA))
        .cache()
    )
    return (
        agreement.unionByName(per_node)
        .unionByName(_rebuildable(per_node, committed_end))
        .unionByName(_snapshot_age(snapshots, log))
        .unionByName(_voters(snapshots, log))
    )
