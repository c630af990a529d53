"""Finding the metadata logs under the paths a user gives, and decoding one file into Arrow batches.

Paths may name a node's `__cluster_metadata-0` directory, the log dir holding it (with its
`meta.properties`), a single `.log`/`.checkpoint` file, or any directory above them (a fleet's
backup tree); every `__cluster_metadata-0` below is found. Which cluster and node a file belongs to
comes from the `meta.properties` beside the partition directory, as Kafka's and ours both write it.

Decoding one file is what one Spark task does. It uses the engine's read-only reader
(`kraft_engine.storage.log_file_reader`) and record decoders (`kraft_engine.records`); nothing here
parses bytes by itself. Damage never raises: a batch with a bad CRC, a torn tail, a record of an
unknown type or version becomes a row whose `problem` says what is wrong, at which file, byte
position and offset, with the bytes in `raw`, so nothing is dropped without a trace.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from kraft_engine.records import (
    ControlRecordError,
    MetadataRecordError,
    decode_control_record,
    decode_metadata_record,
    record_type_of,
)
from kraft_engine.storage.java_properties import JavaPropertiesError, parse_properties
from kraft_engine.storage.log_file_reader import (
    LogFileKind,
    ScannedBatch,
    ScanStop,
    classify_log_file,
    list_log_files,
    read_batch_records,
    read_log_file,
    scan_batches,
)
from kraft_engine.storage.meta_properties import (
    META_PROPERTIES_FILE_NAME,
    MetaProperties,
    MetaPropertiesError,
)
from kraft_pipeline.record_schema import RECORD_STRUCT, record_struct_array

__all__ = [
    "LogFile",
    "METADATA_PARTITION_DIR",
    "ROW_SCHEMA",
    "UNKNOWN_CLUSTER_ID",
    "UNKNOWN_NODE_ID",
    "decode_bytes",
    "decode_file",
    "find_log_files",
    "identity_of",
]

METADATA_PARTITION_DIR = "__cluster_metadata-0"
UNKNOWN_NODE_ID = -1
UNKNOWN_CLUSTER_ID = "unknown"

ROW_SCHEMA = pa.schema(
    [
        pa.field("cluster_id", pa.string(), nullable=False),
        pa.field("node_id", pa.int32(), nullable=False),
        pa.field("file", pa.string(), nullable=False),
        pa.field("file_kind", pa.string(), nullable=False),  # segment, snapshot or bootstrap
        pa.field("snapshot_end_offset", pa.int64()),  # the snapshot's id, for snapshot rows
        pa.field("snapshot_epoch", pa.int32()),
        pa.field("position", pa.int64()),  # the batch's byte position in the file
        pa.field("offset", pa.int64()),
        pa.field("batch_base_offset", pa.int64()),
        pa.field("batch_last_offset", pa.int64()),
        pa.field("leader_epoch", pa.int32()),
        pa.field("batch_timestamp_ms", pa.int64()),
        pa.field("batch_crc", pa.int64()),
        pa.field("batch_sha256", pa.string()),  # the whole batch's bytes, to compare nodes' copies
        pa.field("is_control", pa.bool_()),
        pa.field("record_type", pa.string()),
        pa.field("record_version", pa.int16()),
        pa.field("record", RECORD_STRUCT),
        # The record's value bytes as stored: a replay decodes them again with the engine, where
        # handing the typed struct across to a Python worker would cost more than decoding.
        pa.field("record_value", pa.binary()),
        pa.field("problem", pa.string()),  # set only on problem rows: what is wrong here
        pa.field("raw", pa.binary()),  # a problem row's unreadable bytes
    ]
)
ROWS_PER_BATCH = 4096


@dataclass(frozen=True, slots=True)
class LogFile:
    """One file to decode, with the cluster and node it belongs to (a Spark input partition)."""

    path: str
    cluster_id: str
    node_id: int
    # Set when the node's identity could not be read (the file is still decoded).
    identity_problem: str | None = None


def _identity(log_dir: Path) -> tuple[str, int, str | None]:
    try:
        raw = (log_dir / META_PROPERTIES_FILE_NAME).read_bytes()
    except FileNotFoundError:
        return identity_of(None, log_dir=str(log_dir))
    except OSError as e:
        return UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID, f"{log_dir}: {e.strerror or e}"
    return identity_of(raw, log_dir=str(log_dir))


def identity_of(raw: bytes | None, *, log_dir: str) -> tuple[str, int, str | None]:
    """(cluster id, node id, what is wrong) from the bytes of a log dir's `meta.properties` (None:
    there is none), wherever they were read from."""
    if raw is None:
        return UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID, f"no meta.properties in {log_dir}"
    try:
        meta = MetaProperties.from_properties(parse_properties(raw.decode("utf-8")))
    except (MetaPropertiesError, JavaPropertiesError, UnicodeDecodeError) as e:
        return UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID, f"Error while reading {log_dir}/{META_PROPERTIES_FILE_NAME}: {e}"
    if meta.cluster_id is None or meta.node_id is None:
        return UNKNOWN_CLUSTER_ID, UNKNOWN_NODE_ID, f"meta.properties in {log_dir} lacks cluster.id or node.id"
    return meta.cluster_id, meta.node_id, None


def _partition_dirs(path: Path) -> Iterator[Path]:
    if path.name == METADATA_PARTITION_DIR:
        yield path
        return
    for root, dirs, _files in os.walk(path):
        if METADATA_PARTITION_DIR in dirs:
            yield Path(root) / METADATA_PARTITION_DIR
        dirs[:] = sorted(d for d in dirs if d != METADATA_PARTITION_DIR)


def find_log_files(paths: list[str]) -> list[LogFile]:
    """Every segment and snapshot under `paths`, in (cluster, node, file) order, each file once."""
    found: dict[str, LogFile] = {}
    for given in paths:
        path = Path(given).resolve()
        if path.is_file():
            if classify_log_file(path.name) is not None:
                cluster_id, node_id, problem = _identity(path.parent.parent)
                found[str(path)] = LogFile(str(path), cluster_id, node_id, problem)
            continue
        for partition_dir in _partition_dirs(path):
            cluster_id, node_id, problem = _identity(partition_dir.parent)
            for name in list_log_files(partition_dir):
                file = str(partition_dir / name.name)
                found[file] = LogFile(file, cluster_id, node_id, problem)
    return sorted(found.values(), key=lambda f: (f.cluster_id, f.node_id, f.path))


# The columns one file's rows share, and those set row by row (`record` apart: see flush).
_FILE_COLUMNS = ("cluster_id", "node_id", "file", "file_kind", "snapshot_end_offset", "snapshot_epoch")
_ROW_COLUMNS = tuple(n for n in ROW_SCHEMA.names if n not in _FILE_COLUMNS and n != "record")


class _Rows:
    """Rows of one file, kept column by column and flushed to Arrow record batches of
    ROWS_PER_BATCH (no dict per row: Arrow builds each column from one list)."""

    def __init__(self, file: LogFile) -> None:
        self.file = file
        name = classify_log_file(Path(file.path).name)
        is_snapshot = name is not None and name.kind is LogFileKind.SNAPSHOT
        self.shared: dict[str, Any] = {
            "cluster_id": file.cluster_id,
            "node_id": file.node_id,
            "file": file.path,
            "file_kind": name.kind.value if name is not None else "unknown",
            "snapshot_end_offset": name.offset if name is not None and is_snapshot else None,
            "snapshot_epoch": name.epoch if name is not None and is_snapshot else None,
        }
        self._clear()

    def _clear(self) -> None:
        self.columns: dict[str, list[Any]] = {name: [] for name in _ROW_COLUMNS}
        self.records: list[tuple[str, object] | None] = []

    def add(self, *, record: tuple[str, object] | None = None, **values: Any) -> None:
        for name, column in self.columns.items():
            column.append(values.get(name))
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def full(self) -> bool:
        return len(self.records) >= ROWS_PER_BATCH

    def flush(self) -> pa.RecordBatch:
        length = len(self.records)
        arrays = []
        for field in ROW_SCHEMA:
            if field.name in self.shared:
                arrays.append(pa.array([self.shared[field.name]] * length, type=field.type))
            elif field.name == "record":
                arrays.append(record_struct_array(self.records))
            else:
                arrays.append(pa.array(self.columns[field.name], type=field.type))
        self._clear()
        return pa.RecordBatch.from_arrays(arrays, schema=ROW_SCHEMA)


def decode_file(file: LogFile) -> Iterator[pa.RecordBatch]:
    """The rows of one local file as Arrow record batches; never raises on damaged input."""
    try:
        data, read_problem = read_log_file(Path(file.path)), None
    except OSError as e:
        data, read_problem = b"", f"{file.path}: cannot read: {e.strerror or e}"
    yield from decode_bytes(file, data, read_problem=read_problem)


def decode_bytes(file: LogFile, data: bytes, *, read_problem: str | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one file's bytes (however they were read) as Arrow record batches; never raises
    on damaged input. `read_problem` says why the file could not be read (its bytes then empty)."""
    rows = _Rows(file)
    if file.identity_problem is not None:
        rows.add(problem=f"{file.path}: cannot tell the node: {file.identity_problem}")
    if read_problem is not None:
        rows.add(problem=read_problem)
    next_offset: int | None = None
    for item in scan_batches(data):
        if isinstance(item, ScanStop):
            rows.add(
                position=item.position,
                offset=next_offset,
                problem=(
                    f"{file.path}: {'torn tail' if item.torn else 'unreadable bytes'} at byte {item.position}"
                    f" (after offset {None if next_offset is None else next_offset - 1}): {item.reason}; "
                    f"{len(data) - item.position} bytes not read"
                ),
                raw=data[item.position :],
            )
            break
        header = item.header
        batch: dict[str, Any] = {
            "position": item.position,
            "batch_base_offset": header.base_offset,
            "batch_last_offset": header.last_offset,
            "leader_epoch": header.partition_leader_epoch,
            "batch_timestamp_ms": header.max_timestamp,
            "batch_crc": header.crc,
            "batch_sha256": hashlib.sha256(item.raw).hexdigest(),
            "is_control": header.is_control,
        }
        next_offset = header.next_offset
        if item.crc_error is not None:
            rows.add(
                **batch,
                offset=header.base_offset,
                problem=(
                    f"{file.path}: batch at byte {item.position} (offsets {header.base_offset}.."
                    f"{header.last_offset}) is corrupt: {item.crc_error}"
                ),
                raw=item.raw,
            )
        else:
            _add_records(rows, batch=batch, item=item)
        if rows.full():
            yield rows.flush()
    if len(rows):
        yield rows.flush()


class _DecodedBatches:
    """The records of batches this process decoded lately, by the SHA-256 of the batch's bytes.

    Every node keeps a copy of its cluster's log, the same batches byte for byte: identical bytes
    decode to identical records, so a copy's batch is decoded once per process, not once per node
    (the data source lists a segment's copies one after another, and a Python worker takes task
    after task). Only batches whose every record decoded are kept (a problem row names its file).
    Bounded by a number of records, the oldest batches forgotten first."""

    def __init__(self, records_max: int) -> None:
        self.records_max = records_max
        self._batches: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()
        self._records = 0

    def get(self, sha256: str) -> list[dict[str, Any]] | None:
        return self._batches.get(sha256)

    def put(self, sha256: str, records: list[dict[str, Any]]) -> None:
        if len(records) > self.records_max or sha256 in self._batches:
            return
        self._batches[sha256] = records
        self._records += len(records)
        while self._records > self.records_max:
            _, forgotten = self._batches.popitem(last=False)
            self._records -= len(forgotten)


_DECODED = _DecodedBatches(records_max=1 << 18)


def _add_records(rows: _Rows, *, batch: dict[str, Any], item: ScannedBatch) -> None:
    decoded = _DECODED.get(batch["batch_sha256"])
    if decoded is None:
        decoded = _decode_records(rows, batch=batch, item=item)
        if decoded is None:
            return
        _DECODED.put(batch["batch_sha256"], decoded)
    for values in decoded:
        rows.add(**batch, **values)


def _decode_records(rows: _Rows, *, batch: dict[str, Any], item: ScannedBatch) -> list[dict[str, Any]] | None:
    """The values of each record's row, or None when some record (or the batch) did not decode:
    then every row, problems included, is added here."""
    file, header, raw = rows.file, item.header, item.raw
    try:
        records = read_batch_records(header, raw)
    except ValueError as e:
        rows.add(
            **batch,
            offset=header.base_offset,
            problem=f"{file.path}: records of the batch at offset {header.base_offset} do not decode: {e}",
            raw=raw,
        )
        return None
    decoded: list[dict[str, Any]] = []
    problems: list[dict[str, Any]] = []
    for record in records:
        try:
            entity: object
            if header.is_control:
                _, control = decode_control_record(record.key, record.value)
                entity, type_name, version = control, type(control).__name__, int(control.version)
            else:
                if record.value is None:
                    raise MetadataRecordError("the record has no value")
                entity, version = decode_metadata_record(record.value)
                type_name = record_type_of(entity).name
        except (MetadataRecordError, ControlRecordError, ValueError) as e:
            values: dict[str, Any] = {
                "offset": record.offset,
                "problem": f"{file.path}: record at offset {record.offset} does not decode: {e}",
                "raw": record.value,
            }
            decoded.append(values)
            problems.append(values)
            continue
        good: dict[str, Any] = {
            "offset": record.offset,
            "record_type": type_name,
            "record_version": version,
            "record": (type_name, entity),
            "record_value": record.value,
        }
        decoded.append(good)
    if not problems:
        return decoded
    for values in decoded:
        rows.add(**batch, **values)
    return None
