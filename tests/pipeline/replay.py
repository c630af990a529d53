"""A straight replay of one node's metadata log through the engine's MetadataLoader, independent of
Spark, for checking the pipeline's tables against: the image after every batch, and the offset of
every record by type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kraft_engine.metadata.loader import MetadataLoader
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import decode_metadata_record, parse_batches
from kraft_engine.storage.log_file_reader import (
    LogFileKind,
    ScannedBatch,
    list_log_files,
    read_log_file,
    scan_batches,
)


@dataclass
class Replay:
    # offset -> (record type name, record)
    records: dict[int, tuple[str, object]] = field(default_factory=dict)
    # last offset of each batch -> the image after it
    images: dict[int, MetadataImage] = field(default_factory=dict)
    batch_times_ms: dict[int, int] = field(default_factory=dict)

    def image_at(self, offset: int) -> MetadataImage:
        """The image once every batch up to and including the one holding `offset` is applied."""
        return self.images[min(last for last in self.images if last >= offset)]

    def offsets_of(self, type_name: str) -> list[int]:
        return sorted(o for o, (t, _) in self.records.items() if t == type_name)


def straight_replay(partition_dir: Path) -> Replay:
    """Every segment's batches up to the first damaged one, decoded and replayed as a broker does
    (`parse_batches`, `CommittedBatch.of(...).with_records(...)`, `MetadataLoader.handle_commit`)."""
    replay = Replay()
    loader = MetadataLoader()
    for name in list_log_files(partition_dir):
        if name.kind is not LogFileKind.SEGMENT:
            continue
        for item in scan_batches(read_log_file(partition_dir / name.name)):
            if not isinstance(item, ScannedBatch) or item.crc_error is not None:
                break
            (batch,) = parse_batches(item.raw)
            decoded = tuple(decode_metadata_record(value)[0] for value in batch.records)
            for offset, entity in enumerate(batch.control_records or decoded, start=batch.base_offset):
                replay.records[offset] = (type(entity).__name__, entity)
                replay.batch_times_ms[offset] = batch.append_timestamp_ms
            loader.handle_commit([CommittedBatch.of(batch).with_records(decoded)])
            replay.images[batch.last_offset] = loader.image
    return replay
