"""A straight replay of one node's metadata log through the engine's MetadataLoader, independent of
Spark, for checking the pipeline's tables against: the image after every batch, and the offset of
every record by type."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kraft_engine.kafka_uuid import from_kafka_str
from kraft_engine.metadata.loader import MetadataLoader
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    TopicRecord,
    decode_metadata_record,
    parse_batches,
)
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


def check_history_against_replay(history: list[dict[str, Any]], replay: Replay) -> None:
    """Each interval of `partition_history` is the loader's image of that partition at its start
    (intervals that changed again within the same batch are skipped: the loader's images are per
    batch), and an interval still open is the final image's."""
    if not history:
        raise AssertionError("partition_history is empty")

    def batch_of(offset: int) -> int:
        return min(last for last in replay.images if last >= offset)

    for interval in history:
        if interval["end_offset"] is not None and batch_of(interval["end_offset"]) == batch_of(interval["start_offset"]):
            continue
        image = replay.image_at(interval["start_offset"])
        state = image.topics.get_partition(from_kafka_str(interval["topic_id"]), interval["partition"])
        if state is None:
            raise AssertionError(f"the loader's image has no partition for {interval}")
        got = (interval["leader"], interval["leader_epoch"], interval["partition_epoch"],
               interval["replicas"], interval["isr"])
        want = (state.leader, state.leader_epoch, state.partition_epoch, list(state.replicas), list(state.isr))
        if got != want:
            raise AssertionError(f"{interval} differs from the loader's {want}")
        if interval["end_offset"] is None:
            final = replay.images[max(replay.images)].topics.get_partition(
                from_kafka_str(interval["topic_id"]), interval["partition"])
            if final is None or final.partition_epoch != interval["partition_epoch"]:
                raise AssertionError(f"the open interval {interval} is not the final image's {final}")


def check_events_against_replay(events: list[dict[str, Any]], replay: Replay) -> None:
    """Topic creations, broker registrations and fencings are at exactly the offsets holding those
    records in the replayed log, and each fencing or unfencing leaves the loader's image so."""
    for kind, record_type in {"topic_created": TopicRecord, "broker_registered": RegisterBrokerRecord}.items():
        found = sorted(e["offset"] for e in events if e["event"] == kind)
        if found != replay.offsets_of(record_type.__name__):
            raise AssertionError(f"{kind} at {found}, the log's {record_type.__name__} at "
                                 f"{replay.offsets_of(record_type.__name__)}")
    fences = sorted(e["offset"] for e in events if e["event"] == "broker_fenced")
    replayed = sorted(
        o for o, (_, r) in replay.records.items()
        if isinstance(r, FenceBrokerRecord) or (isinstance(r, BrokerRegistrationChangeRecord) and r.fenced == 1)
    )
    if fences != replayed:
        raise AssertionError(f"broker_fenced at {fences}, the log's fencings at {replayed}")
    for e in events:
        if e["event"] in ("broker_fenced", "broker_unfenced"):
            broker = replay.image_at(e["offset"]).cluster.broker(e["node_id"])
            if broker is None or broker.fenced != (e["event"] == "broker_fenced"):
                raise AssertionError(f"{e} but the loader's image holds {broker}")
