"""Hand-built node directories for the pipeline's unit tests: meta.properties and segments of
batches holding the engine's own encoded records (the process test covers logs written by real
nodes)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

from kraft_engine.records import build_batch, build_control_batch, encode_metadata_record
from kraft_engine.records.control import ControlRecord
from kraft_engine.storage.meta_properties import MetaProperties, write_meta_properties

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
TS_MS = 1_795_214_642_000


def node_dir(root: Path, node_id: int, *, cluster_id: str = CLUSTER_ID) -> Path:
    """The partition directory of node `node_id` under root/node-<id>/ (created, with meta.properties)."""
    log_dir = root / f"node-{node_id}"
    log_dir.mkdir(parents=True, exist_ok=True)
    write_meta_properties(
        log_dir,
        MetaProperties(version=1, cluster_id=cluster_id, node_id=node_id, directory_id=uuid.UUID(int=node_id)),
    )
    partition = log_dir / "__cluster_metadata-0"
    partition.mkdir(exist_ok=True)
    return partition


Batch = tuple[int, Sequence[object]]  # (leader epoch, records), or control records


def batches_bytes(batches: Sequence[Batch], *, base_offset: int = 0, step_ms: int = 1000) -> tuple[bytes, int]:
    """The bytes of `batches` from `base_offset`, and the next offset."""
    out = bytearray()
    offset = base_offset
    for index, (epoch, records) in enumerate(batches):
        ts = TS_MS + (offset if step_ms == 0 else index * step_ms + base_offset * step_ms)
        if records and _is_control(records[0]):
            out += build_control_batch(
                base_offset=offset, partition_leader_epoch=epoch, timestamp_ms=ts,
                records=list(records),  # type: ignore[arg-type]
            )
        else:
            out += build_batch(
                base_offset=offset, partition_leader_epoch=epoch, timestamp_ms=ts,
                values=[encode_metadata_record(r) for r in records],
            )
        offset += len(records)
    return bytes(out), offset


def _is_control(record: object) -> bool:
    return type(record).__module__.startswith("kio.schema")


def write_segment(partition: Path, batches: Sequence[Batch], *, base_offset: int = 0) -> int:
    data, next_offset = batches_bytes(batches, base_offset=base_offset)
    (partition / f"{base_offset:020d}.log").write_bytes(data)
    return next_offset


__all__ = ["CLUSTER_ID", "TS_MS", "ControlRecord", "batches_bytes", "node_dir", "write_segment"]
