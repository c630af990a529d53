"""Snapshots: creation at a committed offset, retention, download by a lagging follower, restart."""

from __future__ import annotations

import pytest
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from raft_harness import Cluster

from kraft_engine.errors import SnapshotError
from kraft_engine.raft import MemoryLog, RaftConfig, Role, SnapshotLoad
from kraft_engine.records import log_batch
from kraft_engine.records.batches import DecodedRecord
from kraft_engine.records.log_batch import OffsetAndEpoch, parse_batches


def cluster_with_data(config: RaftConfig | None = None, count: int = 20) -> tuple[Cluster, object]:
    cluster = Cluster([1, 2, 3], config=config)
    leader = cluster.elect()
    for i in range(count):
        leader.append([f"v{i}".encode()], epoch=leader.epoch, now_ms=cluster.now_ms)
        cluster.advance(30)
    cluster.advance(500)
    return cluster, leader


def test_snapshot_is_framed_like_kafkas_and_holds_the_state_machine_records() -> None:
    cluster, leader = cluster_with_data()
    hwm = leader.high_watermark
    snapshot_id = leader.create_snapshot(end_offset=hwm, records=[b"state-1", b"state-2"], last_contained_log_timestamp_ms=1234, now_ms=cluster.now_ms)
    assert snapshot_id == OffsetAndEpoch(epoch=leader.epoch, offset=hwm)
    log = cluster[leader.node_id].log
    batches = parse_batches(log.read_snapshot(snapshot_id, 0, log.snapshot_size(snapshot_id)))
    assert isinstance(batches[0].control_records[0], SnapshotHeaderRecord)
    assert batches[0].control_records[0].last_contained_log_timestamp == 1234
    assert isinstance(batches[-1].control_records[0], SnapshotFooterRecord)
    data = [v for b in batches if not b.is_control for v in b.records]
    assert data == [b"state-1", b"state-2"]
    assert all(b.epoch == snapshot_id.epoch for b in batches)


def test_snapshot_of_an_uncommitted_offset_is_refused() -> None:
    cluster, leader = cluster_with_data(count=2)
    with pytest.raises(SnapshotError):
        leader.create_snapshot(end_offset=leader.high_watermark + 1, records=[], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    assert cluster[leader.node_id].log.snapshot_ids() == []


def test_retention_drops_the_log_prefix_but_keeps_the_latest_snapshot() -> None:
    cluster, leader = cluster_with_data(RaftConfig(retention_max_bytes=1))
    log = cluster[leader.node_id].log
    first = leader.create_snapshot(end_offset=10, records=[b"s"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    assert log.log_start_offset == 10
    second = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"s2"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    assert log.snapshot_ids() == [second]
    assert first not in log.snapshot_ids()
    assert log.log_start_offset == second.offset


def test_lagging_follower_downloads_the_snapshot_in_slices_and_catches_up() -> None:
    config = RaftConfig(retention_max_bytes=1, fetch_snapshot_max_bytes=64)
    cluster = Cluster([1, 2, 3], config=config)
    leader = cluster.elect()
    cluster.advance(500)
    lagging = next(i for i in (1, 2, 3) if i != leader.node_id)
    cluster.crash(lagging)
    for i in range(10):
        leader.append([f"v{i}".encode()], epoch=leader.epoch, now_ms=cluster.now_ms)
        cluster.advance(30)
    cluster.advance(500)
    snapshot_id = leader.create_snapshot(
        end_offset=leader.high_watermark, records=[b"image"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms
    )
    leader.append([b"after"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(100)
    # Restart the lagging voter with an empty disk: it must load the snapshot, then the tail.
    cluster.records[lagging].alive = True
    record = cluster.start(lagging, MemoryLog())
    cluster.advance(3_000)
    slices = [e for e in cluster.sent if type(e.payload).__name__ == "FetchSnapshotRequest" and e.source == lagging]
    assert len(slices) > 1
    # Each slice names the snapshot id and the position after the bytes already received.
    answers = [e for e in cluster.sent if type(e.payload).__name__ == "FetchSnapshotResponse" and e.destination == lagging]
    position = 0
    for request, response in zip(slices, answers, strict=True):
        asked = request.payload.topics[0].partitions[0]
        assert (int(asked.snapshot_id.end_offset), int(asked.snapshot_id.epoch)) == (snapshot_id.offset, snapshot_id.epoch)
        assert int(asked.position) == position
        answered = response.payload.topics[0].partitions[0]
        assert int(answered.position) == position and 0 < len(answered.unaligned_records) <= 64
        position += len(answered.unaligned_records)
    assert position == int(answered.size)
    assert record.log.snapshot_ids() == [snapshot_id]
    assert record.log.log_start_offset == snapshot_id.offset
    loads = record.snapshot_loads
    assert [load.snapshot_id for load in loads] == [snapshot_id]
    assert [v for b in loads[0].batches for v in b.records] == [b"image"]
    assert record.committed_values == [b"after"]
    assert cluster.node(lagging).role is Role.FOLLOWER


def test_a_node_restarts_from_its_latest_snapshot_and_replays_the_log_after_it() -> None:
    cluster, leader = cluster_with_data(RaftConfig(retention_max_bytes=1), count=5)
    snapshot_id = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"img"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    leader.append([b"tail"], epoch=leader.epoch, now_ms=cluster.now_ms)
    cluster.advance(500)
    node_id = leader.node_id
    cluster.crash(node_id)
    restarted = cluster.restart(node_id)
    cluster.advance(5_000)
    events = restarted.events
    assert isinstance(events[0], SnapshotLoad) and events[0].snapshot_id == snapshot_id
    assert b"tail" in restarted.committed_values
    assert all(v not in restarted.committed_values for v in (b"v0", b"v4"))


def test_a_snapshot_load_leaves_its_data_batches_for_the_state_machine_to_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    # Raft parses only the snapshot's control batches (the header's timestamp); its data batches
    # (a 100k-partition image's records) are parsed when the state machine first reads `batches`,
    # on the state machine's own thread instead of raft's loop.
    decoded: list[bytes | None] = []  # every data record value decoded, in the order decoded
    real_decode = log_batch.decode_records

    def recording_decode(raw: bytes | bytearray | memoryview) -> list[DecodedRecord]:
        records = real_decode(raw)
        decoded.extend(r.value for r in records)
        return records

    monkeypatch.setattr(log_batch, "decode_records", recording_decode)
    cluster, leader = cluster_with_data(RaftConfig(retention_max_bytes=1), count=5)
    snapshot_id = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"img-1", b"img-2"],
                                         last_contained_log_timestamp_ms=77, now_ms=cluster.now_ms)
    cluster.advance(500)
    node_id = leader.node_id
    cluster.crash(node_id)
    restarted = cluster.restart(node_id)
    cluster.advance(5_000)
    [load] = restarted.snapshot_loads
    assert load.snapshot_id == snapshot_id
    assert load.last_contained_log_timestamp_ms == 77
    assert b"img-1" not in decoded  # raft handed the snapshot over without decoding its data
    assert [v for b in load.batches for v in b.records] == [b"img-1", b"img-2"]
    assert isinstance(load.batches[0].control_records[0], SnapshotHeaderRecord)
    assert [v for b in load.batches for v in b.records] == [b"img-1", b"img-2"]
    assert decoded.count(b"img-1") == 1  # decoded once, when first read


def test_a_downloaded_snapshot_replaces_the_followers_older_snapshots() -> None:
    config = RaftConfig(retention_max_bytes=1)
    cluster = Cluster([1, 2, 3], config=config)
    leader = cluster.elect()
    for i in range(5):
        leader.append([f"a{i}".encode()], epoch=leader.epoch, now_ms=cluster.now_ms)
        cluster.advance(30)
    cluster.advance(500)
    lagging_id = next(i for i in (1, 2, 3) if i != leader.node_id)
    lagging = cluster.node(lagging_id)
    own = lagging.create_snapshot(end_offset=lagging.high_watermark, records=[b"old"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    cluster.crash(lagging_id)
    for i in range(5):
        leader.append([f"b{i}".encode()], epoch=leader.epoch, now_ms=cluster.now_ms)
        cluster.advance(30)
    cluster.advance(500)
    newer = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"new"], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    record = cluster.restart(lagging_id)
    cluster.advance(3_000)
    assert record.log.snapshot_ids() == [newer]
    assert own not in record.log.snapshot_ids()
    assert record.log.log_start_offset == newer.offset


def test_snapshot_of_a_dynamic_quorum_holds_the_voters_as_of_its_offset() -> None:
    from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
    from kio.schema.voters_record.v0.data import VotersRecord
    from raft_harness import voter_set

    cluster = Cluster([1, 2, 3], static=False)
    leader = cluster.elect()
    cluster.advance(1_000)
    snapshot_id = leader.create_snapshot(end_offset=leader.high_watermark, records=[], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    log = cluster[leader.node_id].log
    controls = [r for b in parse_batches(log.read_snapshot(snapshot_id, 0, log.snapshot_size(snapshot_id))) for r in b.control_records]
    assert [type(r) for r in controls] == [SnapshotHeaderRecord, KRaftVersionRecord, VotersRecord, SnapshotFooterRecord]
    assert controls[1].k_raft_version == 1
    from kraft_engine.raft import VoterSet

    assert VoterSet.from_record(controls[2]) == voter_set([1, 2, 3])


def test_restart_with_a_snapshot_and_the_uncleaned_log_before_it_rebuilds_the_voters_once() -> None:
    from raft_harness import voter_set

    cluster = Cluster([1, 2, 3], static=False)
    leader = cluster.elect()
    cluster.advance(1_000)
    node_id = leader.node_id
    snapshot_id = leader.create_snapshot(end_offset=leader.high_watermark, records=[], last_contained_log_timestamp_ms=0, now_ms=cluster.now_ms)
    # No retention pressure: the log still starts at 0, before the snapshot.
    assert cluster[node_id].log.log_start_offset == 0
    cluster.crash(node_id)
    restarted = cluster.restart(node_id)
    assert restarted.node.voters == voter_set([1, 2, 3])
    assert restarted.node.kraft_version == 1
    assert snapshot_id in restarted.log.snapshot_ids()


def test_time_retention_drops_snapshots_older_than_retention_and_the_log_before_the_next() -> None:
    config = RaftConfig(retention_max_ms=60_000)
    cluster, leader = cluster_with_data(config, count=6)
    now = cluster.now_ms
    old = leader.create_snapshot(end_offset=3, records=[b"o"], last_contained_log_timestamp_ms=now - 120_000, now_ms=now)
    recent = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"r"], last_contained_log_timestamp_ms=now, now_ms=now)
    log = cluster[leader.node_id].log
    # The old snapshot is expired: it goes, and the log before the next snapshot with it.
    assert log.snapshot_ids() == [recent]
    assert old not in log.snapshot_ids()
    assert log.log_start_offset == recent.offset


def test_time_retention_keeps_snapshots_within_retention() -> None:
    config = RaftConfig(retention_max_ms=600_000)
    cluster, leader = cluster_with_data(config, count=6)
    now = cluster.now_ms
    first = leader.create_snapshot(end_offset=3, records=[b"o"], last_contained_log_timestamp_ms=now - 1_000, now_ms=now)
    second = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"r"], last_contained_log_timestamp_ms=now, now_ms=now)
    cluster.advance(120_000)
    log = cluster[leader.node_id].log
    assert log.snapshot_ids() == [first, second]
    assert log.log_start_offset == 0


def test_negative_retention_limits_mean_unlimited() -> None:
    config = RaftConfig(retention_max_bytes=-1, retention_max_ms=-1)
    cluster, leader = cluster_with_data(config, count=6)
    now = cluster.now_ms
    first = leader.create_snapshot(end_offset=3, records=[b"o"], last_contained_log_timestamp_ms=0, now_ms=now)
    second = leader.create_snapshot(end_offset=leader.high_watermark, records=[b"r"], last_contained_log_timestamp_ms=0, now_ms=now)
    cluster.advance(120_000)
    log = cluster[leader.node_id].log
    assert log.snapshot_ids() == [first, second]
    assert log.log_start_offset == 0
