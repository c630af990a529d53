"""A straight replay of one node's metadata log through the engine's MetadataLoader, independent of
Spark, for checking the pipeline's tables against: the image after every batch, and the offset of
every record by type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kraft_engine.metadata.loader import MetadataLoader
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import decode_control_record, decode_metadata_record
from kraft_engine.storage.log_file_reader import (
    LogFileKind,
    ScannedBatch,
    list_log_files,
    read_batch_records,
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
    replay = Replay()
    loader = MetadataLoader()
    for name in list_log_files(partition_dir):
        if name.kind is not LogFileKind.SEGMENT:
            continue
        for item in scan_batches(read_log_file(partition_dir / name.name)):
            if not isinstance(item, ScannedBatch) or item.crc_error is not None:
                break
            header = item.header
            decoded: list[object] = []
            for record in read_batch_records(header, item.raw):
                if header.is_control:
                    _, control = decode_control_record(record.key, record.value)
                    replay.records[record.offset] = (type(control).__name__, control)
                else:
                    assert record.value is not None
                    entity, _ = decode_metadata_record(record.value)
                    replay.records[record.offset] = (type(entity).__name__, entity)
                    decoded.append(entity)
                replay.batch_times_ms[record.offset] = header.max_timestamp
            loader.handle_commit(
                [
                    CommittedBatch(
                        base_offset=header.base_offset,
                        last_offset=header.last_offset,
                        epoch=header.partition_leader_epoch,
                        append_timestamp_ms=header.max_timestamp,
                        size_in_bytes=header.size_bytes,
                        records=tuple(decoded),
                    )
                ]
            )
            replay.images[header.last_offset] = loader.image
    return replay
