"""Record builders shared by the metadata tests: brokers, topics and partitions as the controller writes them."""

from __future__ import annotations

import uuid

from kraft_engine.metadata import MetadataDelta, MetadataImage, MetadataProvenance, TopicIdPartition
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import PartitionChangeRun, RecordParts
from kraft_engine.records.metadata_records import (
    BrokerEndpoint,
    BrokerFeature,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    TopicRecord,
)


def topic_id(n: int) -> uuid.UUID:
    # Above Kafka's 100 reserved Uuids.
    return uuid.UUID(int=1000 + n)


def dir_id(n: int) -> uuid.UUID:
    return uuid.UUID(int=5000 + n)


def mv_record(level: int) -> FeatureLevelRecord:
    return FeatureLevelRecord(name="metadata.version", feature_level=level)


def register_broker(
    broker_id: int, *, epoch: int = 100, fenced: bool = False, log_dirs: tuple[uuid.UUID, ...] = ()
) -> RegisterBrokerRecord:
    return RegisterBrokerRecord(
        broker_id=broker_id,
        incarnation_id=uuid.UUID(int=9000 + broker_id),
        broker_epoch=epoch,
        end_points=(
            BrokerEndpoint(name="PLAINTEXT", host=f"b{broker_id}.local", port=9092, security_protocol=0),
        ),
        features=(BrokerFeature(name="metadata.version", min_supported_version=7, max_supported_version=25),),
        rack=None,
        fenced=fenced,
        log_dirs=log_dirs,
    )


def topic(name: str, n: int) -> TopicRecord:
    return TopicRecord(name=name, topic_id=topic_id(n))


def partition(
    n: int,
    partition_id: int,
    *,
    replicas: tuple[int, ...],
    leader: int | None = None,
    directories: tuple[uuid.UUID, ...] = (),
) -> PartitionRecord:
    return PartitionRecord(
        partition_id=partition_id,
        topic_id=topic_id(n),
        replicas=replicas,
        isr=replicas,
        removing_replicas=(),
        adding_replicas=(),
        leader=replicas[0] if leader is None else leader,
        leader_epoch=0,
        partition_epoch=0,
        directories=directories,
    )


def change(n: int, partition_id: int, **fields: object) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=partition_id, topic_id=topic_id(n), **fields)  # type: ignore[arg-type]


PROVENANCE = MetadataProvenance(
    last_contained_offset=41, last_contained_epoch=3, last_contained_log_time_ms=7, is_offset_batch_aligned=True
)


def image_of(*records: object, base: MetadataImage = MetadataImage.EMPTY, offset: int = 0) -> MetadataImage:
    delta = MetadataDelta(base)
    for record in records:
        delta.replay(record)
    return delta.apply(
        MetadataProvenance(
            last_contained_offset=offset, last_contained_epoch=1, last_contained_log_time_ms=0, is_offset_batch_aligned=True
        )
    )


def batches_of(records: list[object], sizes: list[int], *, base_offset: int = 0, epoch: int = 1) -> list[CommittedBatch]:
    """Split `records` into consecutive batches of the given sizes (the last takes the rest)."""
    out: list[CommittedBatch] = []
    offset, start = base_offset, 0
    for size in [*sizes, len(records)]:
        chunk = records[start : start + size]
        if not chunk:
            if start >= len(records):
                break
            continue
        out.append(
            CommittedBatch(
                base_offset=offset,
                last_offset=offset + len(chunk) - 1,
                epoch=epoch,
                append_timestamp_ms=1_700_000_000_000 + offset,
                size_in_bytes=100 * len(chunk),
                records=tuple(chunk),
            )
        )
        offset += len(chunk)
        start += len(chunk)
    return out


def as_runs(records: list[object], *, version: int = 0) -> RecordParts[object]:
    """`records`, with each stretch of PartitionChangeRecords held as a `PartitionChangeRun` (as
    the active controller hands its own fan-out's records to its loader): records alike but for
    their ids share one change."""
    parts: list[object] = []
    stretch: list[PartitionChangeRecord] = []

    def close() -> None:
        if not stretch:
            return
        changes: dict[tuple[object, ...], int] = {}
        kinds = [changes.setdefault(_shape(r), len(changes)) for r in stretch]
        templates = {kind: r for r, kind in zip(stretch, kinds, strict=True)}
        parts.append(PartitionChangeRun(changes=[templates[k] for k in range(len(changes))], version=version,
                                        kinds=kinds, partition_ids=[r.partition_id for r in stretch],
                                        topic_ids=[r.topic_id for r in stretch]))
        stretch.clear()

    for record in records:
        if type(record) is PartitionChangeRecord:
            stretch.append(record)
            continue
        close()
        parts.append((record,))
    close()
    return RecordParts(parts)  # type: ignore[arg-type]


def _shape(record: PartitionChangeRecord) -> tuple[object, ...]:
    return (record.isr, record.leader, record.replicas, record.removing_replicas, record.adding_replicas,
            record.leader_recovery_state, record.directories, record.eligible_leader_replicas, record.last_known_elr)


def assert_indexes_match_a_full_scan(image: MetadataImage) -> None:
    """The image's reverse indexes (leaders, ISR members, replicas) and its offline and imbalance
    counts are what a scan of every partition finds."""
    leaders: dict[int, set[TopicIdPartition]] = {}
    isr: dict[int, set[TopicIdPartition]] = {}
    replicas: dict[int, set[TopicIdPartition]] = {}
    offline = imbalanced = 0
    for topic_image in image.topics.topics_by_id.values():
        for partition_id, registration in topic_image.partitions.items():
            tp = TopicIdPartition(topic_image.id, partition_id)
            if registration.has_leader:
                leaders.setdefault(registration.leader, set()).add(tp)
            for broker in registration.isr:
                isr.setdefault(broker, set()).add(tp)
            for broker in registration.replicas:
                replicas.setdefault(broker, set()).add(tp)
            offline += not registration.has_leader
            imbalanced += not registration.has_preferred_leader
    topics = image.topics
    assert {b: set(topics.partitions_led_by(b)) for b in topics.leaders.brokers()} == leaders
    assert {b: set(topics.partitions_with_isr_member(b)) for b in topics.isr_members.brokers()} == isr
    assert {b: set(topics.partitions_with_replica(b)) for b in topics.replicas.brokers()} == replicas
    assert topics.offline_partition_count == offline
    assert topics.preferred_replica_imbalance_count == imbalanced
