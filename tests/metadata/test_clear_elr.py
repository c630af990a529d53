"""ClearElrRecord in the metadata image (KIP-966): a broker's view of a partition loses its ELR and
last known ELR as the controller's does, the partition epoch moving as a merged PartitionChangeRecord
moves it, for one topic by name or for every topic when the name is empty."""

from __future__ import annotations

import uuid

import pytest

from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.metadata_delta import MetadataDelta
from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.records import ClearElrRecord, PartitionChangeRecord, PartitionRecord, TopicRecord

T, U = uuid.UUID(int=1), uuid.UUID(int=2)


def _image(*records: object) -> MetadataImage:
    delta = MetadataDelta(MetadataImage.EMPTY)
    for record in records:
        delta.replay(record)
    return delta.apply(MetadataProvenance(last_contained_offset=len(records), last_contained_epoch=1,
                                          last_contained_log_time_ms=0, is_offset_batch_aligned=True))


def _with_elr() -> list[object]:
    records: list[object] = []
    for topic_id, name in ((T, "t"), (U, "u")):
        records.append(TopicRecord(name=name, topic_id=topic_id))
        for p in (0, 1):
            records.append(PartitionRecord(partition_id=p, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3),
                                           leader=1, leader_epoch=0, partition_epoch=0, removing_replicas=(),
                                           adding_replicas=()))
        records.append(PartitionChangeRecord(partition_id=0, topic_id=topic_id, isr=(1,), eligible_leader_replicas=(2, 3),
                                             last_known_elr=(2,)))
    return records


def test_clearing_one_topic_empties_its_elrs_and_moves_only_their_partition_epochs() -> None:
    image = _image(*_with_elr(), ClearElrRecord(topic_name="t"))
    t0, t1, u0 = (image.topics.get_partition(T, 0), image.topics.get_partition(T, 1), image.topics.get_partition(U, 0))
    assert t0 is not None and t1 is not None and u0 is not None
    assert (t0.elr, t0.last_known_elr, t0.partition_epoch, t0.isr, t0.leader) == ((), (), 2, (1,), 1)
    assert t1.partition_epoch == 0
    assert (u0.elr, u0.last_known_elr, u0.partition_epoch) == ((2, 3), (2,), 1)


def test_the_empty_name_clears_every_topic_including_one_created_in_the_same_delta() -> None:
    image = _image(*_with_elr(), ClearElrRecord(topic_name=""))
    for topic_id in (T, U):
        registration = image.topics.get_partition(topic_id, 0)
        assert registration is not None and (registration.elr, registration.last_known_elr) == ((), ())
    # Over an existing image, in a later delta.
    base = _image(*_with_elr())
    delta = MetadataDelta(base)
    delta.replay(ClearElrRecord(topic_name="u"))
    later = delta.apply(MetadataProvenance(last_contained_offset=99, last_contained_epoch=1,
                                             last_contained_log_time_ms=0, is_offset_batch_aligned=True))
    u0 = later.topics.get_partition(U, 0)
    assert u0 is not None and (u0.elr, u0.partition_epoch) == ((), 2)
    assert later.topics.get_partition(T, 0) == base.topics.get_partition(T, 0)


def test_a_clear_elr_record_naming_an_unknown_topic_is_a_replay_error() -> None:
    with pytest.raises(MetadataReplayError, match="unknown topic 'nope'"):
        _image(*_with_elr(), ClearElrRecord(topic_name="nope"))
