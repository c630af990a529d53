"""MetadataLoader: folding committed batches, metadata transactions, the catch-up gate, publishers."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from metadata_log_helpers import (
    as_runs,
    assert_indexes_match_a_full_scan,
    batches_of,
    change,
    image_of,
    mv_record,
    partition,
    register_broker,
    topic,
    topic_id,
)

from kraft_engine.metadata import (
    LoaderManifest,
    LogDeltaManifest,
    MetadataDelta,
    MetadataImage,
    MetadataLoader,
    MetadataReplayError,
    SnapshotManifest,
)
from kraft_engine.raft import CommittedBatch, LeaderAndEpoch
from kraft_engine.records.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    FenceBrokerRecord,
    NoOpRecord,
)


@dataclass
class Recorder:
    name: str
    log: list[tuple[str, object]] = field(default_factory=list)
    updates: list[tuple[MetadataDelta, MetadataImage, LoaderManifest]] = field(default_factory=list)

    def on_metadata_update(self, delta: MetadataDelta, *, image: MetadataImage, manifest: LoaderManifest) -> None:
        self.updates.append((delta, image, manifest))
        self.log.append((self.name, image.offset))

    def on_controller_change(self, leader_and_epoch: LeaderAndEpoch) -> None:
        self.log.append((self.name, leader_and_epoch))


BOOTSTRAP = [mv_record(25), register_broker(1), register_broker(2)]


def caught_up_loader(*publishers: Recorder) -> MetadataLoader:
    loader = MetadataLoader()
    loader.install_publishers(list(publishers))
    loader.handle_commit(batches_of(BOOTSTRAP, [3]), high_watermark=3)
    return loader


def test_many_batches_in_one_commit_become_one_publish() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    recorder.updates.clear()
    records = [topic("t", 1), partition(1, 0, replicas=(1, 2)), partition(1, 1, replicas=(2, 1)), change(1, 0, isr=(1,))]
    loader.handle_commit(batches_of(records, [1, 2], base_offset=3), elapsed_ns=1234)
    assert len(recorder.updates) == 1
    delta, image, manifest = recorder.updates[0]
    assert isinstance(manifest, LogDeltaManifest)
    assert (manifest.num_batches, manifest.num_bytes, manifest.elapsed_ns) == (3, 400, 1234)
    assert manifest.provenance.last_contained_offset == 6 and manifest.provenance.is_offset_batch_aligned
    assert image is loader.image and delta.image.offset == 2
    assert image.topics.get_partition(topic_id(1), 0).isr == (1,)  # type: ignore[union-attr]


def test_nothing_is_published_until_the_high_watermark_is_reached() -> None:
    recorder = Recorder("r")
    loader = MetadataLoader()
    loader.install_publishers([recorder])
    loader.handle_commit(batches_of(BOOTSTRAP[:1], [1]))
    assert loader.image.offset == 0 and loader.catching_up and recorder.updates == []
    loader.handle_commit(batches_of(BOOTSTRAP[1:2], [1], base_offset=1), high_watermark=10)
    assert loader.image.offset == 1 and recorder.updates == []
    loader.update_high_watermark(2)
    # Caught up (offset 1 >= hwm - 1): the new publisher gets the whole image at once.
    assert not loader.catching_up
    assert len(recorder.updates) == 1
    delta, image, manifest = recorder.updates[0]
    assert isinstance(manifest, SnapshotManifest) and manifest.provenance.last_contained_offset == 1
    assert delta.image is MetadataImage.EMPTY
    assert sorted(image.cluster.brokers) == [1]


def test_an_empty_log_keeps_the_gate_closed_until_a_record_is_applied() -> None:
    loader = MetadataLoader()
    loader.update_high_watermark(0)
    assert loader.catching_up
    loader.handle_commit(batches_of(BOOTSTRAP, [3]), high_watermark=3)
    assert not loader.catching_up


def test_publishers_are_called_in_install_order_and_new_ones_start_from_the_whole_image() -> None:
    log: list[tuple[str, object]] = []
    first, second = Recorder("first", log), Recorder("second", log)
    loader = caught_up_loader(first, second)
    third = Recorder("third", log)
    loader.install_publishers([third])
    loader.handle_commit(batches_of([topic("t", 1)], [1], base_offset=3))
    assert log == [
        ("first", 2),
        ("first", LeaderAndEpoch.UNKNOWN),
        ("second", 2),
        ("second", LeaderAndEpoch.UNKNOWN),
        ("third", 2),
        ("third", LeaderAndEpoch.UNKNOWN),
        ("first", 3),
        ("second", 3),
        ("third", 3),
    ]
    catch_up_delta = third.updates[0][0]
    assert catch_up_delta.cluster_delta is not None and sorted(catch_up_delta.cluster_delta.changed_brokers) == [1, 2]
    assert loader.publisher_names == ["first", "second", "third"]
    loader.handle_leader_change(LeaderAndEpoch(3000, 7))
    assert log[-3:] == [(name, LeaderAndEpoch(3000, 7)) for name in ("first", "second", "third")]


def test_duplicate_publisher_names_are_refused() -> None:
    loader = caught_up_loader(Recorder("a"))
    with pytest.raises(ValueError, match="'a' is already installed"):
        loader.install_publishers([Recorder("a")])
    assert loader.remove_publisher("a").name == "a"
    with pytest.raises(KeyError):
        loader.remove_publisher("a")


def test_records_of_a_transaction_are_published_together() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    recorder.updates.clear()
    loader.handle_commit(batches_of([BeginTransactionRecord(name="create"), topic("t", 1)], [2], base_offset=3))
    assert recorder.updates == [] and loader.image.topics.is_empty()
    loader.handle_commit(batches_of([partition(1, 0, replicas=(1, 2))], [1], base_offset=5))
    assert recorder.updates == []
    loader.handle_commit(batches_of([partition(1, 1, replicas=(2, 1)), EndTransactionRecord()], [2], base_offset=6))
    assert len(recorder.updates) == 1
    _, image, manifest = recorder.updates[0]
    assert sorted(image.topics.get_topic(topic_id(1)).partitions) == [0, 1]  # type: ignore[union-attr]
    assert isinstance(manifest, LogDeltaManifest) and manifest.num_batches == 3
    assert manifest.provenance.last_contained_offset == 7


def test_an_aborted_transaction_is_discarded_and_later_records_apply() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    recorder.updates.clear()
    records = [
        BeginTransactionRecord(name="create"),
        topic("doomed", 1),
        partition(1, 0, replicas=(1, 2)),
        AbortTransactionRecord(reason="controller failover"),
        topic("kept", 2),
    ]
    loader.handle_commit(batches_of(records, [2, 2], base_offset=3))
    assert list(loader.image.topics.topics_by_name) == ["kept"]
    assert len(recorder.updates) == 1
    assert recorder.updates[0][2].provenance.last_contained_offset == 7


def test_a_transaction_starting_mid_batch_first_publishes_what_precedes_it() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    recorder.updates.clear()
    records = [topic("before", 1), BeginTransactionRecord(name="x"), topic("inside", 2), AbortTransactionRecord()]
    loader.handle_commit(batches_of(records, [4], base_offset=3))
    first, second = recorder.updates
    assert first[2].provenance.last_contained_offset == 3
    assert not first[2].provenance.is_offset_batch_aligned
    assert list(first[1].topics.topics_by_name) == ["before"]
    assert second[2].provenance.last_contained_offset == 6 and second[2].provenance.is_offset_batch_aligned
    assert list(second[1].topics.topics_by_name) == ["before"]


def test_transaction_markers_out_of_order_are_faults() -> None:
    loader = caught_up_loader()
    with pytest.raises(MetadataReplayError, match=r"offset 3.*EndTransactionRecord without a Begin"):
        loader.handle_commit(batches_of([EndTransactionRecord()], [1], base_offset=3))
    loader = caught_up_loader()
    with pytest.raises(MetadataReplayError, match=r"Begin.*inside an open metadata transaction"):
        loader.handle_commit(batches_of([BeginTransactionRecord(), BeginTransactionRecord()], [2], base_offset=3))


def test_a_record_that_cannot_be_replayed_stops_the_loader() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    before = loader.image
    with pytest.raises(MetadataReplayError, match=r"log record at offset 4: .*cannot fence broker 9"):
        loader.handle_commit(batches_of([NoOpRecord(), FenceBrokerRecord(id=9, epoch=1)], [2], base_offset=3))
    assert loader.image is before
    with pytest.raises(MetadataReplayError, match="stopped after a fault"):
        loader.handle_commit(batches_of([NoOpRecord()], [1], base_offset=5))


def test_batches_must_move_forward() -> None:
    loader = caught_up_loader()
    with pytest.raises(ValueError, match="not after the loader's last offset 2"):
        loader.handle_commit(batches_of([NoOpRecord()], [1], base_offset=2))
    with pytest.raises(ValueError, match="claims last offset"):
        CommittedBatch(base_offset=0, last_offset=5, epoch=1, append_timestamp_ms=0, size_in_bytes=0, records=(NoOpRecord(),))


def test_control_batches_advance_the_offset() -> None:
    loader = caught_up_loader()
    loader.handle_commit([CommittedBatch(base_offset=3, last_offset=3, epoch=2, append_timestamp_ms=9, size_in_bytes=80, records=())])
    assert loader.image.provenance.last_contained_offset == 3
    assert loader.image.provenance.last_contained_epoch == 2


def test_loading_a_snapshot_replaces_the_image_and_drops_what_it_lacks() -> None:
    recorder = Recorder("r")
    loader = caught_up_loader(recorder)
    loader.handle_commit(batches_of([topic("old", 1)], [1], base_offset=3))
    # Pending transaction records are discarded by the snapshot too.
    loader.handle_commit(batches_of([BeginTransactionRecord(), topic("pending", 3)], [2], base_offset=4))
    snapshot = [mv_record(25), register_broker(2), topic("new", 2), partition(2, 0, replicas=(2,))]
    loader.handle_load_snapshot(
        snapshot, last_contained_offset=99, last_contained_epoch=4, last_contained_log_time_ms=5, elapsed_ns=10
    )
    image = loader.image
    assert image.offset == 99 and sorted(image.cluster.brokers) == [2]
    assert list(image.topics.topics_by_name) == ["new"]
    _, published, manifest = recorder.updates[-1]
    assert published is image and isinstance(manifest, SnapshotManifest) and manifest.elapsed_ns == 10
    loader.handle_commit(batches_of([change(2, 0, isr=(2,))], [1], base_offset=100))
    assert loader.image.offset == 100


def test_a_failing_publisher_is_reported_and_the_others_still_run() -> None:
    class Broken(Recorder):
        def on_metadata_update(self, delta: MetadataDelta, *, image: MetadataImage, manifest: LoaderManifest) -> None:
            raise RuntimeError("disk on fire")

    faults: list[str] = []
    loader = MetadataLoader(publisher_fault_handler=lambda where, error: faults.append(f"{where}: {error}"))
    healthy = Recorder("healthy")
    loader.install_publishers([Broken("broken"), healthy])
    loader.handle_commit(batches_of(BOOTSTRAP, [3]), high_watermark=3)
    assert faults == ["publisher 'broken' failed in on_metadata_update at offset 2: disk on fire"]
    assert len(healthy.updates) == 1
    unhandled = MetadataLoader()
    unhandled.install_publishers([Broken("broken")])
    with pytest.raises(RuntimeError, match="disk on fire"):
        unhandled.handle_commit(batches_of(BOOTSTRAP, [3]), high_watermark=3)


def test_a_commit_that_only_reports_the_high_watermark_can_open_the_gate() -> None:
    recorder = Recorder("r")
    loader = MetadataLoader()
    loader.install_publishers([recorder])
    loader.handle_commit(batches_of(BOOTSTRAP, [3]), high_watermark=100)
    assert recorder.updates == []
    loader.handle_commit([], high_watermark=3)
    assert [image.offset for _, image, _ in recorder.updates] == [2]


_ISRS = st.sampled_from([(1,), (2,), (1, 2), (2, 1), (1, 2, 3), (3,)])
_CHANGES = st.lists(
    st.tuples(st.integers(1, 3), st.integers(0, 2), _ISRS, st.sampled_from([-2, -1, 1, 2, 3]), st.booleans()),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(changes=_CHANGES, start_with_other=st.booleans(), columns=st.booleans())
def test_runs_of_partition_changes_load_as_record_by_record_replay_does(
    changes: list[tuple[int, int, tuple[int, ...], int, bool]], start_with_other: bool, columns: bool,
) -> None:
    """The loader replays a run of PartitionChangeRecords in one go (a fence at 100k partitions is
    one record per partition); the image it publishes is the one record-by-record replay builds,
    reverse indexes and counts included, with partitions changed twice in a run and topics created
    in the same batch. A run holding a record that cannot be replayed fails naming that record.
    The same holds when the batch holds its changes as `PartitionChangeRun`s (`columns`: the
    active controller's own fan-out, handed to its loader unbuilt)."""
    created = [topic("t3", 3), partition(3, 0, replicas=(3, 1, 2)), partition(3, 1, replicas=(1, 2, 3)),
               partition(3, 2, replicas=(2, 3, 1))]
    base = [*BOOTSTRAP, register_broker(3), topic("t1", 1), *(partition(1, p, replicas=(1, 2, 3)) for p in range(3)),
            topic("t2", 2), *(partition(2, p, replicas=(2, 3)) for p in range(3))]
    records: list[object] = [*created, *([NoOpRecord()] if start_with_other else [])]
    for n, p, isr, leader, with_replicas in changes:
        fields: dict[str, object] = {"isr": isr, "leader": leader}
        if with_replicas:
            fields["replicas"] = (3, 2, 1)
            fields["directories"] = ()
        records.append(change(n, p, **fields))
    loader = MetadataLoader()
    loader.handle_commit(batches_of(base, [len(base)]), high_watermark=len(base))
    batches = batches_of(records, [len(records)], base_offset=len(base))
    if columns:
        batches = [batch.with_records(as_runs(records)) for batch in batches]  # type: ignore[arg-type]
    loader.handle_commit(batches, high_watermark=len(base) + len(records))
    expected = image_of(*base, *records, offset=len(base) + len(records) - 1)
    got = loader.image.topics
    assert got.topics_by_id == expected.topics.topics_by_id
    for index in ("leaders", "isr_members", "replicas"):
        assert getattr(got, index).by_broker == getattr(expected.topics, index).by_broker, index
    assert (got.offline_partition_count, got.preferred_replica_imbalance_count) == (
        expected.topics.offline_partition_count, expected.topics.preferred_replica_imbalance_count)


@pytest.mark.parametrize("columns", [False, True])
def test_a_run_with_a_record_for_an_unknown_partition_fails_naming_that_record(columns: bool) -> None:
    loader = MetadataLoader()
    base = [*BOOTSTRAP, topic("t1", 1), partition(1, 0, replicas=(1, 2)), partition(1, 1, replicas=(1, 2))]
    loader.handle_commit(batches_of(base, [len(base)]), high_watermark=len(base))
    run = [change(1, 0, isr=(1,)), change(1, 1, isr=(1,)), change(1, 7, isr=(1,)), change(1, 0, isr=(2,))]
    batches = batches_of(run, [len(run)], base_offset=len(base))
    if columns:
        batches = [batch.with_records(as_runs(run)) for batch in batches]  # type: ignore[arg-type]
    with pytest.raises(MetadataReplayError, match=f"log record at offset {len(base) + 2}: .*unknown partition 7"):
        loader.handle_commit(batches, high_watermark=len(base) + len(run))


@settings(max_examples=60, deadline=None)
@given(
    runs=st.lists(
        st.lists(st.tuples(_ISRS, st.sampled_from([-2, -1, 1, 2, 3]), st.sets(st.integers(0, 14), min_size=1)),
                 max_size=4),
        min_size=1, max_size=3,
    )
)
def test_partitions_sharing_a_state_are_indexed_and_counted_as_a_full_scan_finds_them(
    runs: list[list[tuple[tuple[int, ...], int, set[int]]]],
) -> None:
    """Partitions in one state share one registration, and the image accounts each distinct
    (before, after) pair once for all its partitions (a fence moves 100k partitions through a few
    pairs). Leaders, ISR members, replicas and the offline and imbalance counts are what a scan of
    every partition of the published image finds, after every commit."""
    base = [*BOOTSTRAP, register_broker(3)]
    for n in (1, 2, 3):
        base += [topic(f"t{n}", n), *(partition(n, p, replicas=(1, 2, 3) if p % 2 else (2, 3, 1)) for p in range(5))]
    loader = MetadataLoader()
    loader.handle_commit(batches_of(base, [len(base)]), high_watermark=len(base))
    offset = len(base)
    for run in runs:
        # Each change goes to a set of partitions at once, as a fence's does (partition i of the
        # 15 is partition i % 5 of topic 1 + i // 5).
        records: list[object] = [change(1 + i // 5, i % 5, isr=isr, leader=leader)
                                 for isr, leader, chosen in run for i in sorted(chosen)]
        if not records:
            continue
        loader.handle_commit(batches_of(records, [len(records)], base_offset=offset), high_watermark=offset + len(records))
        offset += len(records)
        assert_indexes_match_a_full_scan(loader.image)
