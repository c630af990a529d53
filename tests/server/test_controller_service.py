"""ControllerService on a real single-voter raft node, in-process on the event loop.

The raft node runs under the node's own RaftDriver over a file-backed metadata log and
quorum-state in a temporary directory (a single voter sends nothing). Requests go through the
service the way the listener's handlers send them.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i64, u16
from prometheus_client import CollectorRegistry

from kraft_engine.controller import ControllerApiError, QuorumController, RecordAndVersion
from kraft_engine.metadata import VersionRange
from kraft_engine.protocol import ConnectionConfig
from kraft_engine.raft import (
    CommittedBatch,
    ElectionState,
    NotLeaderError,
    RaftConfig,
    RaftNode,
    ReplicaKey,
    SnapshotLoad,
    VoterNode,
    VoterSet,
)
from kraft_engine.raft.messages import describe_quorum_request
from kraft_engine.records import (
    FeatureLevelRecord,
    NoOpRecord,
    TopicRecord,
    decode_metadata_record,
    encode_metadata_record,
)
from kraft_engine.records.log_batch import OffsetAndEpoch, parse_batches
from kraft_engine.server import controller_service
from kraft_engine.server.controller_service import ControllerService, RaftAppends, SnapshotPolicy
from kraft_engine.server.raft_driver import RaftDriver, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage.metadata_log import FileMetadataLog
from kraft_engine.storage.quorum_state_store import QUORUM_STATE_FILE_NAME, FileQuorumStateStore

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
MV = 25
NODE_ID = 3000


class _Driver(RaftDriver):
    """The node's raft driver, with a switch that makes raft refuse the controller's appends."""

    refuse_appends = False

    def prepare_appends(self, batches: list[list[bytes]], *, epoch: int) -> list[int]:
        if self.refuse_appends:
            raise NotLeaderError("refused by the test")
        return super().prepare_appends(batches, epoch=epoch)


def _driver(directory: Path, registry: CollectorRegistry) -> _Driver:
    """A single voter over a file-backed metadata log in `directory` (reopened as it was left)."""
    log, _ = FileMetadataLog.open(directory)
    quorum_state = FileQuorumStateStore(directory / QUORUM_STATE_FILE_NAME)
    saved = quorum_state.read()
    persisted = None if saved is None else ElectionState(
        epoch=saved.leader_epoch, leader_id=saved.leader_id,
        voted_key=None if saved.voted_id is None else ReplicaKey.of(saved.voted_id, None),
    )
    raft = RaftNode(
        config=RaftConfig(append_linger_ms=1),
        node_id=NODE_ID,
        directory_id=None,
        cluster_id=CLUSTER_ID,
        log=log,
        persisted=persisted,
        static_voters=VoterSet([VoterNode(key=ReplicaKey(NODE_ID, None), endpoints=())]),
        rng=random.Random(1),
        now_ms=wall_clock_ms(),
        local_endpoints=(),
        bootstrap_servers=(),
    )
    return _Driver(raft=raft, log=log, quorum_state=quorum_state, store=None,
                   metrics=RaftMetrics(registry, node=lambda: raft),
                   connection_config=ConnectionConfig(client_id="test"))


def _controller(raft: RaftDriver, node_id: int = NODE_ID, *, no_op_interval_ms: int | None = None) -> QuorumController:
    return QuorumController(
        node_id=node_id,
        raft=RaftAppends(raft),
        quorum_node_ids=(node_id,),
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=MV), 0)],
        local_supported_features={"metadata.version": VersionRange(7, MV)},
        cluster_id=CLUSTER_ID,
        rng=random.Random(7),
        # The brokers here heartbeat once and go quiet; no test in this module is about their
        # sessions, so one that ran longer than 9 s on a loaded machine must not see them fenced.
        session_timeout_ms=600_000,
        **({} if no_op_interval_ms is None else {"metadata_max_idle_interval_ms": no_op_interval_ms}),
    )


class ManualClock:
    """The controller's clock, moved only by the test (raft keeps the wall clock)."""

    def __init__(self) -> None:
        self.now_ms = wall_clock_ms()

    def __call__(self) -> int:
        return self.now_ms


class InProcessController:
    def __init__(self, directory: Path, *, policy: SnapshotPolicy | None = None, clock: ManualClock | None = None,
                 no_op_interval_ms: int | None = None) -> None:
        self.directory = directory
        self.registry = CollectorRegistry()
        self.raft = _driver(directory, self.registry)
        self.service = ControllerService(
            controller=_controller(self.raft, no_op_interval_ms=no_op_interval_ms), raft=self.raft,
            registry=self.registry, supported_features={"metadata.version": (7, MV)}, snapshot_policy=policy,
            **({} if clock is None else {"clock_ms": clock}),
        )
        self.raft.add_listener(self.service.handle_raft_event)

    @property
    def log(self) -> FileMetadataLog:
        return self.raft.log

    async def start(self) -> None:
        self.service.start()
        self.raft.start()
        async with asyncio.timeout(10):
            while not self.service.controller.is_active() or self.service.loader.image.features.metadata_version is None:
                await asyncio.sleep(0.005)

    async def close(self) -> None:
        await self.raft.close()
        await self.service.close()

    def metric(self, name: str) -> float | None:
        return self.registry.get_sample_value(name)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[InProcessController]:
    n = InProcessController(tmp_path)
    await n.start()
    try:
        yield n
    finally:
        await n.close()


def _topics(*specs: tuple[str, int, int]) -> CreateTopicsRequest:
    return CreateTopicsRequest(
        topics=tuple(
            CreatableTopic(name=TopicName(name), num_partitions=i32(p), replication_factor=i16(rf), assignments=(),
                           configs=())
            for name, p, rf in specs
        )
    )


def _registration(broker_id: int) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=BrokerId(broker_id), cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
        listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092 + broker_id), security_protocol=i16(0)),),
        features=(Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(MV)),),
        rack=None, log_dirs=(uuid.uuid4(),),
    )


async def _unfenced_broker(node: InProcessController, broker_id: int) -> int:
    service = node.service
    reply = await service.write("registerBroker", lambda c: c.register_broker(_registration(broker_id), now_ms=0))
    epoch = int(reply.broker_epoch)
    heartbeat = BrokerHeartbeatRequest(
        broker_id=BrokerId(broker_id), broker_epoch=i64(epoch),
        current_metadata_offset=i64(node.service.controller.last_stable_offset()), want_fence=False,
        want_shut_down=False,
    )
    answer = await service.write("processBrokerHeartbeat", lambda c: c.broker_heartbeat(heartbeat, now_ms=0))
    assert not answer.is_fenced
    return epoch


def _log_records(log: FileMetadataLog) -> list[tuple[int, Any]]:
    out = []
    for batch in parse_batches(log.read(0, 1 << 30)):
        for index, value in enumerate(batch.records):
            out.append((batch.base_offset + index, decode_metadata_record(value)[0]))
    return out


async def test_the_node_activates_and_writes_the_bootstrap_records(node: InProcessController) -> None:
    records = [r for _, r in _log_records(node.log)]
    assert FeatureLevelRecord(name="metadata.version", feature_level=MV) in records
    assert node.metric("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert node.metric("kafka_controller_kafkacontroller_newactivecontrollerscount") == 1
    features = node.service.features()
    assert features.finalized["metadata.version"] == MV
    assert features.supported["metadata.version"] == (7, MV)


async def test_a_created_topic_is_in_the_log_and_the_image_when_the_write_completes(node: InProcessController) -> None:
    for broker in (1, 2, 3):
        await _unfenced_broker(node, broker)
    [result] = await node.service.write("createTopics", lambda c: c.create_topics(_topics(("orders", 3, 3))))
    assert result.error_code == ErrorCode.none
    # Acknowledged means committed: the records are in the log below the high watermark.
    hwm = node.raft.high_watermark
    assert hwm is not None
    topic_offsets = [o for o, r in _log_records(node.log) if isinstance(r, TopicRecord) and r.name == "orders"]
    assert topic_offsets and topic_offsets[0] < hwm
    assert node.metric("kafka_controller_kafkacontroller_globaltopiccount") == 1
    assert node.metric("kafka_controller_kafkacontroller_globalpartitioncount") == 3
    assert node.metric("kafka_controller_kafkacontroller_activebrokercount") == 3
    async with asyncio.timeout(5):
        while "orders" not in node.service.image.topics.topics_by_name:
            await asyncio.sleep(0.005)
    assert node.metric("kafka_controller_kafkacontroller_lastcommittedrecordoffset") == hwm - 1


async def test_a_refused_append_renounces_reverts_and_the_client_gets_not_controller(node: InProcessController) -> None:
    for broker in (1, 2, 3):
        await _unfenced_broker(node, broker)
    node.raft.refuse_appends = True
    with pytest.raises(ControllerApiError) as refused:
        await node.service.write("createTopics", lambda c: c.create_topics(_topics(("lost", 1, 3))))
    assert refused.value.error_code == ErrorCode.not_controller
    controller = node.service.controller
    assert not controller.is_active()
    # The applied-but-uncommitted topic was reverted.
    assert controller.replication_control.topic_id("lost") is None
    assert node.metric("kafka_controller_kafkacontroller_activecontrollercount") == 0
    # While not active, every write is refused with NOT_CONTROLLER.
    with pytest.raises(ControllerApiError) as again:
        await node.service.write("createTopics", lambda c: c.create_topics(_topics(("lost", 1, 3))))
    assert again.value.error_code == ErrorCode.not_controller
    # Raft was told to resign; the single voter is elected again and the retry succeeds.
    node.raft.refuse_appends = False
    async with asyncio.timeout(10):
        while not controller.is_active():
            await asyncio.sleep(0.01)
    [result] = await node.service.write("createTopics", lambda c: c.create_topics(_topics(("lost", 1, 3))))
    assert result.error_code == ErrorCode.none
    assert node.metric("kafka_controller_kafkacontroller_newactivecontrollerscount") == 2
    assert [r.name for _, r in _log_records(node.log) if isinstance(r, TopicRecord)] == ["lost"]


async def test_a_refused_request_fails_its_own_future_only(node: InProcessController) -> None:
    results = await node.service.write("createTopics", lambda c: c.create_topics(_topics(("t", 1, 3))))
    # No brokers: the topic cannot be placed; the controller answers per topic and keeps going.
    assert results[0].error_code == ErrorCode.invalid_replication_factor
    assert node.service.controller.is_active()


async def test_a_snapshot_is_written_from_the_image_and_a_new_node_loads_it(tmp_path: Path) -> None:
    node = InProcessController(tmp_path, policy=SnapshotPolicy(max_bytes_between_snapshots=1, max_interval_ms=0))
    await node.start()
    try:
        for broker in (1, 2, 3):
            await _unfenced_broker(node, broker)
        await node.service.write("createTopics", lambda c: c.create_topics(_topics(("a", 2, 3), ("b", 1, 1))))
        async with asyncio.timeout(10):
            while not node.service.snapshots_written or node.service.snapshots_written[-1].offset < node.raft.high_watermark:  # type: ignore[operator]
                await node.service.write("createTopics", lambda c: c.create_topics(_topics()))
                await asyncio.sleep(0.01)
        snapshot = node.log.snapshot_ids()[-1]
    finally:
        await node.close()
    original = node.service.image  # the image of everything the node committed
    # A restarted node over the same files loads that snapshot and replays the rest of the log.
    restarted = InProcessController(tmp_path)
    await restarted.start()
    try:
        assert snapshot in restarted.log.snapshot_ids()
        async with asyncio.timeout(60):
            while restarted.service.image.offset < original.offset:
                await asyncio.sleep(0.005)
        controller = restarted.service.controller
        assert controller.replication_control.topic_id("a") is not None
        assert controller.replication_control.topic_id("b") is not None
        # Read once, settled past everything the first node committed. The restarted node writes
        # records of its own as it starts (its controller registration, a new incarnation), so the
        # whole image may have moved on; topics, configs and features it leaves as they were.
        image = restarted.service.image
        assert image.topics == original.topics
        assert image.configs == original.configs
        assert image.features == original.features
        assert sorted(image.cluster.brokers) == sorted(original.cluster.brokers)
    finally:
        await restarted.close()


async def test_an_active_controller_asked_to_load_a_snapshot_stops_and_fails_waiters(node: InProcessController) -> None:
    stopped: list[BaseException] = []
    node.service._on_fatal = stopped.append
    node.service.handle_raft_event(SnapshotLoad(snapshot_id=OffsetAndEpoch(epoch=1, offset=5),
                                                last_contained_log_timestamp_ms=0, batches=()))
    async with asyncio.timeout(5):
        while not stopped:
            await asyncio.sleep(0.005)
    assert node.metric("kafka_controller_kafkacontroller_metadataerrorcount") == 1
    with pytest.raises(Exception, match="stopped"):
        await node.service.write("createTopics", lambda c: c.create_topics(_topics(("x", 1, 1))))


async def _controller_pass(node: InProcessController) -> None:
    """Until the controller thread has woken, ticked and checked for a due snapshot at least once:
    the second read runs only after the first read's pass has ended."""
    for _ in range(2):
        await node.service.read("pass", lambda c: None)


async def _snapshots_settled(node: InProcessController, count: int) -> None:
    async with asyncio.timeout(10):
        while len(node.service.snapshots_written) < count:
            await asyncio.sleep(0.005)
    thread = node.service._snapshot_thread
    if thread is not None:
        await asyncio.to_thread(thread.join, 10)


async def test_the_snapshot_interval_writes_a_snapshot_only_when_something_new_committed(tmp_path: Path) -> None:
    # The controller's clock is the test's: every interval below has truly passed when the
    # controller checks, so "no snapshot" is a decision, not a check made too early. NoOps are
    # off (metadata.max.idle.interval.ms=0): the idle writer's records are new commits too.
    clock = ManualClock()
    interval_ms = 60_000
    node = InProcessController(tmp_path, policy=SnapshotPolicy(max_bytes_between_snapshots=1 << 40,
                                                               max_interval_ms=interval_ms),
                               clock=clock, no_op_interval_ms=0)
    await node.start()
    try:
        await _controller_pass(node)
        assert node.service.snapshots_written == []  # the bootstrap records are new, the interval has not passed
        clock.now_ms += interval_ms
        await _controller_pass(node)
        await _snapshots_settled(node, 1)
        # Ten intervals with nothing committed: checked after each, and no snapshot.
        for _ in range(10):
            clock.now_ms += interval_ms
            await _controller_pass(node)
        assert len(node.service.snapshots_written) == 1
        # A new record: the interval has long passed, so the commit that applies it is followed by
        # a snapshot that holds it (Kafka's SnapshotGenerator decides on each published delta too).
        await node.service.write("registerBroker", lambda c: c.register_broker(_registration(1), now_ms=clock()))
        await _snapshots_settled(node, 2)
        assert node.service.snapshots_written[1].offset > node.service.snapshots_written[0].offset
    finally:
        await node.close()


async def test_consecutive_commits_reach_the_loader_as_one_delta(node: InProcessController) -> None:
    published: list[int] = []

    class _Counter:
        name = "counter"

        def on_metadata_update(self, delta: Any, *, image: Any, manifest: Any) -> None:
            published.append(getattr(manifest, "num_batches", 0))

        def on_controller_change(self, leader_and_epoch: Any) -> None:
            pass

    node.service.loader.install_publishers([_Counter()])
    for broker in (1, 2, 3):
        await _unfenced_broker(node, broker)
    published.clear()
    # Three batches committed while the controller thread is busy are folded into one publish.
    # From here on this node is a standby that is handed three batches another leader wrote.
    await node.raft.close()
    busy = threading.Event()
    release = threading.Event()

    def hold(controller: QuorumController) -> None:
        controller.renounce()
        busy.set()
        release.wait(10)

    node.service.run_on_controller("busy", hold)
    await asyncio.to_thread(busy.wait, 10)
    offset = node.raft.log_end_offset
    for index in range(3):
        value = encode_metadata_record(NoOpRecord(), 0)
        node.service.handle_raft_event(CommittedBatch(
            base_offset=offset + index, last_offset=offset + index, epoch=99, append_timestamp_ms=0,
            records=(value,), control_records=(), size_in_bytes=80, raw=b"",
        ))
    release.set()
    async with asyncio.timeout(5):
        while not published:
            await asyncio.sleep(0.005)
    assert published == [3]
    assert node.service.image.offset == offset + 2
    assert node.service.fault is None


async def test_the_raft_metrics_the_issue_names_are_exported_with_this_nodes_values(node: InProcessController) -> None:
    # Kafka's raft metric names under Prometheus names (kraft_engine.server.raft_metrics), as a
    # dashboard scrapes them from a node that elected itself and committed writes.
    await _unfenced_broker(node, 1)
    hwm = node.raft.high_watermark
    assert hwm is not None and hwm > 0
    assert node.metric("kafka_raft_current_leader") == NODE_ID
    assert node.metric("kafka_raft_current_epoch") == node.raft.raft.epoch >= 1
    assert node.registry.get_sample_value("kafka_raft_current_state", {"state": "leader"}) == 1
    assert node.registry.get_sample_value("kafka_raft_current_state", {"state": "follower"}) == 0
    assert node.metric("kafka_raft_high_watermark") == hwm
    assert node.metric("kafka_raft_log_end_offset") == node.raft.log_end_offset >= hwm
    for name in ("commit_latency_avg", "commit_latency_max"):
        value = node.metric(f"kafka_raft_{name}")
        assert value is not None and value >= 0, name  # NaN (no commit seen) fails too
    for name in ("election_latency_avg", "election_latency_max"):
        # Exported, but NaN here: a single voter becomes leader within one poll, so the driver
        # never sees it as a candidate (a multi-voter election spans polls and is timed).
        assert node.metric(f"kafka_raft_{name}") is not None, name
    assert node.metric("kafka_raft_fetch_records_rate") == 0  # a leader fetches nothing
    assert (node.metric("kafka_raft_append_records_rate") or 0) > 0
    assert (node.metric("kafka_raft_append_records_total") or 0) >= 2
    assert node.metric("kafka_raft_number_unknown_voter_connections") == 0


async def test_every_controller_metric_the_issue_names_is_exported_with_this_nodes_values(
    node: InProcessController,
) -> None:
    # Broker 1 unfenced and leading "orders"; broker 2 registered but never heartbeated: fenced.
    await _unfenced_broker(node, 1)
    await node.service.write("registerBroker", lambda c: c.register_broker(_registration(2), now_ms=0))
    [result] = await node.service.write("createTopics", lambda c: c.create_topics(_topics(("orders", 2, 1))))
    assert result.error_code == ErrorCode.none
    hwm = node.raft.high_watermark
    assert hwm is not None
    async with asyncio.timeout(5):
        while node.metric("kafka_controller_kafkacontroller_lastappliedrecordoffset") != hwm - 1:
            await asyncio.sleep(0.005)
    prefix = "kafka_controller_kafkacontroller_"
    assert node.metric(prefix + "activecontrollercount") == 1
    assert node.metric(prefix + "newactivecontrollerscount") == 1
    assert node.metric(prefix + "fencedbrokercount") == 1
    assert node.metric(prefix + "activebrokercount") == 1
    assert node.metric(prefix + "globaltopiccount") == 1
    assert node.metric(prefix + "globalpartitioncount") == 2
    assert node.metric(prefix + "offlinepartitionscount") == 0
    assert node.metric(prefix + "preferredreplicaimbalancecount") == 0
    assert node.metric(prefix + "metadataerrorcount") == 0
    assert node.metric(prefix + "lastcommittedrecordoffset") == hwm - 1
    lag = node.metric(prefix + "lastappliedrecordlagms")
    assert lag is not None and lag >= 0
    # Every event above was queued and run: both event-queue timers saw them.
    for timer in ("eventqueuetimems", "eventqueueprocessingtimems"):
        count = node.metric(f"kafka_controller_controllereventmanager_{timer}_count")
        assert count is not None and count >= 4, timer


async def test_raft_keeps_answering_while_the_controller_thread_is_busy(node: InProcessController) -> None:
    # The controller's heavy work (a fence at 100k partitions, a snapshot load) runs on its own
    # thread: raft's loop answers requests meanwhile. Were the controller on raft's loop, the
    # blocked event below would hold that loop and the request would never be answered.
    busy = threading.Event()
    release = threading.Event()

    def hold(controller: QuorumController) -> None:
        busy.set()
        release.wait(30)

    node.service.run_on_controller("busy", hold)
    try:
        await asyncio.to_thread(busy.wait, 10)
        async with asyncio.timeout(10):
            response = await node.raft.handle_request(describe_quorum_request())
        assert response.error_code == ErrorCode.none
        [topic] = response.topics
        [partition] = topic.partitions
        assert partition.leader_id == NODE_ID
        # A client write waits for the controller, and then completes.
        write = asyncio.ensure_future(node.service.write("registerBroker",
                                                         lambda c: c.register_broker(_registration(1), now_ms=0)))
        await asyncio.sleep(0.05)
        assert not write.done()
    finally:
        release.set()
    reply = await write
    assert int(reply.broker_epoch) > 0


_SLICE_RECORDS = 5


async def _node_with_an_image_to_snapshot(tmp_path: Path) -> InProcessController:
    """A node that snapshots after every commit, in slices of `_SLICE_RECORDS` records, with an
    image of a few dozen records, and no snapshot being written."""
    node = InProcessController(tmp_path, policy=SnapshotPolicy(max_bytes_between_snapshots=1, max_interval_ms=0,
                                                                slice_records=_SLICE_RECORDS))
    await node.start()
    for broker in (1, 2, 3):
        await _unfenced_broker(node, broker)
    await node.service.write("createTopics", lambda c: c.create_topics(_topics(("a", 6, 3), ("b", 4, 1))))
    async with asyncio.timeout(30):
        while not node.service.snapshots_written:
            await asyncio.sleep(0.005)
    thread = node.service._snapshot_thread
    if thread is not None:
        await asyncio.to_thread(thread.join, 30)
    assert node.service.image.records().records[2 * _SLICE_RECORDS:]  # more than two slices to write
    return node


class _HeldEncoder:
    """The snapshot writer's record encoder, counting records and holding the writer at record
    `hold_at` until the test releases it."""

    def __init__(self, hold_at: int) -> None:
        self.hold_at = hold_at
        self.calls = 0
        self.held = threading.Event()
        self.release = threading.Event()
        self.order: list[str] = []

    def __call__(self, record: Any, version: int) -> bytes:
        self.calls += 1
        if self.calls == self.hold_at:
            self.held.set()
            self.order.append("hold released" if self.release.wait(20) else "hold timed out")
        return encode_metadata_record(record, version)


async def _snapshot_held(node: InProcessController, encoder: _HeldEncoder, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Start a write whose commit sets off a snapshot, and wait until `encoder` holds its writer;
    the write's future."""
    monkeypatch.setattr(controller_service, "encode_metadata_record", encoder)
    write = asyncio.ensure_future(node.service.write("createTopics", lambda c: c.create_topics(_topics(("c", 1, 1)))))
    assert await asyncio.to_thread(encoder.held.wait, 30)
    return write


async def _next_snapshot(node: InProcessController, written_before: int) -> None:
    async with asyncio.timeout(30):
        while len(node.service.snapshots_written) == written_before:
            await asyncio.sleep(0.005)


async def test_raft_answers_while_a_snapshot_is_being_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The snapshot writer is held in the middle of a slice (its encoder waits until the test
    # releases it): raft's loop answers a request meanwhile, before the hold ends and before the
    # snapshot is stored. Were the snapshot encoded on raft's loop, the held encoder would hold
    # the loop: the hold would end by its own timeout first, and the answer come after it.
    node = await _node_with_an_image_to_snapshot(tmp_path)
    try:
        written_before = len(node.service.snapshots_written)
        snapshots_before = node.log.snapshot_ids()
        encoder = _HeldEncoder(hold_at=3)
        write = await _snapshot_held(node, encoder, monkeypatch)
        try:
            async with asyncio.timeout(30):
                response = await node.raft.handle_request(describe_quorum_request())
            encoder.order.append("answered")
            assert response.error_code == ErrorCode.none
            assert len(node.service.snapshots_written) == written_before
            assert node.log.snapshot_ids() == snapshots_before
        finally:
            encoder.release.set()
        await write
        await _next_snapshot(node, written_before)
        assert encoder.order == ["answered", "hold released"]
        assert node.log.snapshot_ids()[-1] not in snapshots_before
    finally:
        await node.close()


async def test_the_snapshot_writer_waits_for_raft_loop_between_slices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # With raft's loop held (this test runs on it and blocks it on purpose), the writer stops at the
    # end of its slice: it goes on only after the loop went round. A writer that did not wait would
    # encode past the slice while the loop is held.
    node = await _node_with_an_image_to_snapshot(tmp_path)
    try:
        written_before = len(node.service.snapshots_written)
        encoder = _HeldEncoder(hold_at=1)
        write = await _snapshot_held(node, encoder, monkeypatch)
        try:
            encoder.release.set()
            deadline = time.monotonic() + 3
            while encoder.calls <= _SLICE_RECORDS and time.monotonic() < deadline:
                time.sleep(0.01)  # holds raft's loop
            encoded_while_the_loop_was_held = encoder.calls
        finally:
            encoder.release.set()
        assert encoded_while_the_loop_was_held <= _SLICE_RECORDS
        await write
        await _next_snapshot(node, written_before)
        assert encoder.calls > encoded_while_the_loop_was_held  # the rest once the loop ran again
    finally:
        await node.close()
