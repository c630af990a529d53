"""The same committed log gives byte-identical images, however it is batched and wherever snapshots cut it.

Hypothesis writes a valid metadata log (brokers registering, fencing, topics created with
partitions, ISR and leader changes, deletions, configs, producer ids, feature levels, metadata
transactions that commit or abort), then replays it through loaders that see different batchings
and commit groupings, some of them loading a snapshot part-way (a fresh node, the node itself, and
a stale node that is behind and must drop what the snapshot no longer holds). Every loader must end
with the same `image.to_bytes()`, and the image's reverse indexes must agree with a full scan.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from metadata_log_helpers import (
    assert_indexes_match_a_full_scan,
    batches_of,
    change,
    mv_record,
    partition,
    register_broker,
    topic,
    topic_id,
)

from kraft_engine.metadata import MetadataImage, MetadataLoader
from kraft_engine.raft import CommittedBatch
from kraft_engine.records.framing import decode_metadata_record, encode_metadata_record
from kraft_engine.records.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
    FenceBrokerRecord,
    NoOpRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
)


@dataclass
class _Model:
    """Just enough cluster state to write records the image will accept."""

    brokers: dict[int, int] = field(default_factory=dict)  # id -> epoch
    topics: dict[int, dict[int, tuple[int, ...]]] = field(default_factory=dict)  # n -> partition -> isr
    next_topic: int = 1
    next_producer_id: int = 0


def _operation(data: st.DataObject, model: _Model) -> list[object]:
    kinds = ["register", "noop", "config", "producer_ids", "feature"]
    if model.brokers:
        kinds += ["topic", "fence", "unfence", "shutdown", "unregister"]
    if model.topics:
        kinds += ["isr", "isr", "leader", "remove_topic"]
    kind = data.draw(st.sampled_from(kinds))
    if kind == "register":
        broker_id = data.draw(st.integers(1, 5))
        model.brokers[broker_id] = model.brokers.get(broker_id, 0) + 1
        return [register_broker(broker_id, epoch=model.brokers[broker_id], fenced=data.draw(st.booleans()))]
    if kind == "noop":
        return [NoOpRecord()]
    if kind == "config":
        value = data.draw(st.sampled_from([None, "1", "2"]))
        return [ConfigRecord(resource_type=4, resource_name=str(data.draw(st.integers(0, 2))), name="k", value=value)]
    if kind == "producer_ids":
        model.next_producer_id += 1000
        return [ProducerIdsRecord(broker_id=1, broker_epoch=1, next_producer_id=model.next_producer_id)]
    if kind == "feature":
        return [FeatureLevelRecord(name="group.version", feature_level=data.draw(st.integers(0, 1)))]
    brokers = sorted(model.brokers)
    if kind == "topic":
        n = model.next_topic
        model.next_topic += 1
        records: list[object] = [topic(f"t{n}", n)]
        model.topics[n] = {}
        for p in range(data.draw(st.integers(1, 3))):
            replicas = tuple(data.draw(st.permutations(brokers))[: data.draw(st.integers(1, len(brokers)))])
            records.append(partition(n, p, replicas=replicas))
            model.topics[n][p] = replicas
        return records
    if kind in ("fence", "unfence", "shutdown", "unregister"):
        broker_id = data.draw(st.sampled_from(brokers))
        epoch = model.brokers[broker_id]
        if kind == "fence":
            return [FenceBrokerRecord(id=broker_id, epoch=epoch)]
        if kind == "unfence":
            return [UnfenceBrokerRecord(id=broker_id, epoch=epoch)]
        if kind == "shutdown":
            return [BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=epoch, in_controlled_shutdown=1)]
        del model.brokers[broker_id]
        return [UnregisterBrokerRecord(broker_id=broker_id, broker_epoch=epoch)]
    n = data.draw(st.sampled_from(sorted(model.topics)))
    if kind == "remove_topic":
        del model.topics[n]
        return [RemoveTopicRecord(topic_id=topic_id(n))]
    p = data.draw(st.sampled_from(sorted(model.topics[n])))
    replicas = model.topics[n][p]
    if kind == "isr":
        isr = tuple(r for r in replicas if data.draw(st.booleans())) or replicas[:1]
        return [change(n, p, isr=isr)]
    return [change(n, p, leader=data.draw(st.sampled_from([-1, *replicas])))]


def _log(data: st.DataObject) -> list[object]:
    model = _Model()
    records: list[object] = [mv_record(25), register_broker(1, epoch=1)]
    model.brokers[1] = 1
    for _ in range(data.draw(st.integers(5, 40))):
        if data.draw(st.integers(0, 5)) == 0:
            before = copy.deepcopy(model)
            body = [r for _ in range(data.draw(st.integers(1, 4))) for r in _operation(data, model)]
            aborted = data.draw(st.booleans())
            if aborted:
                model = before
            end = AbortTransactionRecord(reason="test") if aborted else EndTransactionRecord()
            records += [BeginTransactionRecord(name="tx"), *body, end]
        else:
            records += _operation(data, model)
    return records


def _batches(data: st.DataObject, records: list[object]) -> list[CommittedBatch]:
    sizes = data.draw(st.lists(st.integers(1, 6), max_size=len(records)))
    return batches_of(records, sizes)


def _commits(data: st.DataObject, batches: list[CommittedBatch]) -> list[list[CommittedBatch]]:
    commits: list[list[CommittedBatch]] = []
    start = 0
    while start < len(batches):
        size = data.draw(st.integers(1, 4))
        commits.append(batches[start : start + size])
        start += size
    return commits


def _snapshot_records(image: MetadataImage) -> list[object]:
    # Through the real encoding, as a snapshot file would carry them.
    return [decode_metadata_record(encode_metadata_record(r, v))[0] for r, v in image.records().records]


def _load_snapshot(loader: MetadataLoader, image: MetadataImage) -> None:
    loader.handle_load_snapshot(
        _snapshot_records(image),
        last_contained_offset=image.provenance.last_contained_offset,
        last_contained_epoch=image.provenance.last_contained_epoch,
        last_contained_log_time_ms=image.provenance.last_contained_log_time_ms,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_every_batching_and_snapshot_point_gives_the_same_image_bytes(data: st.DataObject) -> None:
    records = _log(data)
    high_watermark = len(records)

    straight = MetadataLoader()
    for batch in batches_of(records, [1] * len(records)):
        straight.handle_commit([batch], high_watermark=high_watermark)
    expected = straight.image.to_bytes()
    assert straight.image.offset == len(records) - 1
    assert_indexes_match_a_full_scan(straight.image)

    # Another batching, with snapshots: the node reloads its own image, a fresh node starts from it,
    # and a stale node that stopped earlier jumps to it.
    batches = _batches(data, records)
    commits = _commits(data, batches)
    node = MetadataLoader()
    fresh: MetadataLoader | None = None
    stale = MetadataLoader()
    stale_stop = data.draw(st.integers(0, len(commits) // 2))
    stale_following = True
    for index, commit in enumerate(commits):
        node.handle_commit(commit, high_watermark=high_watermark)
        if fresh is not None:
            fresh.handle_commit(commit, high_watermark=high_watermark)
        if index == stale_stop:
            stale_following = False
        if stale_following:
            stale.handle_commit(commit, high_watermark=high_watermark)
        aligned = node.image.offset == commit[-1].last_offset
        if aligned and data.draw(st.integers(0, 2)) == 0:
            image = node.image
            _load_snapshot(node, image)
            if fresh is None:
                fresh = MetadataLoader()
                _load_snapshot(fresh, image)
            if not stale_following:
                _load_snapshot(stale, image)
                stale_following = True

    if not stale_following:
        _load_snapshot(stale, node.image)
        stale_following = True

    assert node.image.to_bytes() == expected
    assert_indexes_match_a_full_scan(node.image)
    if fresh is not None:
        assert fresh.image.to_bytes() == expected
        assert_indexes_match_a_full_scan(fresh.image)
    assert stale.image.offset == straight.image.offset
    assert stale.image.to_bytes() == expected
    assert_indexes_match_a_full_scan(stale.image)
