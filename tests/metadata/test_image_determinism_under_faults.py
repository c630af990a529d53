"""Every node of a simulated quorum builds byte-identical metadata images from the committed log,
through crashes, restarts, isolations, message loss and snapshot downloads.

The simulation harness runs its raft nodes with a counter as the state machine; here each node
runs a `MetadataLoader` instead (the harness's state-machine slot is duck-typed, see
`_MetadataStateMachine`). The leader appends real metadata records in Kafka's framing: broker
registrations with fencing, unfencing and controlled shutdown, topics with partitions, ISR and
leader changes, topic configs, topic deletions, broker configs, producer-id blocks, and metadata
transactions that commit or abort. Nodes write snapshots from their image (`image.write`), a tiny
retention makes the leader clean its log behind them, and a node that comes back too far behind
is served a snapshot by FetchSnapshot and loads it.

The check is the sim's own ConsistentCommittedData invariant, run after every event: each node
reports, for every committed batch it applies and every snapshot it loads, the CRC of its image's
serialized bytes at that offset. Two nodes (or two incarnations of one node) that ever hold
different bytes at the same committed offset fail the run with its seed. At the end, after the
faults are repaired, every node must have reached the same offset with identical bytes.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import pytest
from metadata_log_helpers import change, mv_record, partition, register_broker, topic, topic_id

from kraft_engine.metadata import MetadataImage, MetadataLoader
from kraft_engine.raft import CommittedBatch, LeaderChange, ListenerEvent, RaftConfig, SnapshotLoad
from kraft_engine.records.framing import decode_metadata_record, encode_metadata_record
from kraft_engine.records.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    EndTransactionRecord,
    FenceBrokerRecord,
    ProducerIdsRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from kraft_engine.sim import ADMIN_ID, LinkRule, Scheduler, SimCluster, SimNode, default_invariants
from kraft_engine.sim.replicated_counter import SnapshotRequest

_TOPIC = 2  # ConfigResource types as Kafka numbers them
_BROKER = 4
_SNAPSHOT_EVERY_OFFSETS = 15
_APPEND_PERIOD_MS = 150


@dataclass
class _MetadataStateMachine:
    """What the sim driver asks of a node's state machine, backed by a real MetadataLoader."""

    node_id: int
    loader: MetadataLoader = field(default_factory=MetadataLoader)
    claimed_epoch: int | None = None
    snapshot_loads_since_leader_change: int = 0
    snapshot_loads: int = 0
    # (offset, CRC of the image bytes at that offset): what the ConsistentCommittedData invariant compares.
    applied: list[tuple[int, int]] = field(default_factory=list)
    pending: list[bytes] = field(default_factory=list)  # the next append, handed out by next_append
    last_offset_snapshotted: int = -1
    last_timestamp_ms: int = 0

    @property
    def writable(self) -> bool:
        return self.claimed_epoch is not None and bool(self.pending)

    def handle(self, event: ListenerEvent) -> None:
        if isinstance(event, CommittedBatch):
            if event.last_offset <= self.loader.last_applied_offset:
                return  # already held by a snapshot this node loaded
            records = tuple(decode_metadata_record(value)[0] for value in event.records)
            self.loader.handle_commit([event.with_records(records)])
            self.last_timestamp_ms = event.append_timestamp_ms
            self._report()
        elif isinstance(event, SnapshotLoad):
            records = [decode_metadata_record(v)[0] for batch in event.batches for v in batch.records]
            self.loader.handle_load_snapshot(
                records,
                last_contained_offset=event.snapshot_id.offset - 1,
                last_contained_epoch=event.snapshot_id.epoch,
                last_contained_log_time_ms=event.last_contained_log_timestamp_ms,
            )
            self.last_offset_snapshotted = event.snapshot_id.offset - 1
            self.snapshot_loads += 1
            self.snapshot_loads_since_leader_change += 1
            self._report()
        elif isinstance(event, LeaderChange):
            mine = event.leader.leader_id == self.node_id
            self.claimed_epoch = event.leader.epoch if mine else None
            self.pending = []
            self.snapshot_loads_since_leader_change = 0

    def _report(self) -> None:
        image = self.loader.image
        if image.features.metadata_version is None:
            return  # nothing serializable yet (the metadata.version record is not committed)
        self.applied.append((image.offset, zlib.crc32(image.to_bytes())))

    # -- the driver's side of appending and snapshotting -------------------------------------------
    def next_append(self) -> bytes:
        return self.pending.pop(0)

    def append_failed(self, count: int = 1) -> None:
        self.pending = []

    def snapshot_due(self) -> SnapshotRequest | None:
        image = self.loader.image
        if image.features.metadata_version is None or not image.provenance.is_offset_batch_aligned:
            return None
        if image.offset < self.last_offset_snapshotted + _SNAPSHOT_EVERY_OFFSETS:
            return None
        records = [encode_metadata_record(record, version) for record, version in image.records().records]
        return SnapshotRequest(image.offset + 1, records, image.provenance.last_contained_log_time_ms)

    def snapshot_taken(self, end_offset: int) -> None:
        self.last_offset_snapshotted = end_offset - 1


def _machine(node: SimNode) -> _MetadataStateMachine:
    machine = node.counter
    assert isinstance(machine, _MetadataStateMachine)
    return machine


@dataclass
class _Workload:
    """One operation per append, each valid whatever became of the operations before it: records
    that reference a broker or topic reference one the same operation registers or creates."""

    scheduler: Scheduler
    sequence: int = 0
    # Topics that must never show up in a committed image: deleted, or created by an aborted transaction.
    vanished_topics: set[str] = field(default_factory=set)

    def operation(self, image: MetadataImage) -> tuple[str, list[object]]:
        rng = self.scheduler.random
        self.sequence += 1
        n = self.sequence
        records: list[object] = []
        if image.features.metadata_version is None:
            records.append(mv_record(25))
        kind = rng.choice(["broker", "topic", "topic", "delete", "config", "producer_ids", "transaction"])
        if kind == "transaction":
            body = self._body(rng.choice(["broker", "topic", "delete"]), n)
            end = AbortTransactionRecord(reason="sim") if rng.random() < 0.3 else EndTransactionRecord()
            if isinstance(end, AbortTransactionRecord):
                self.vanished_topics.update(r.name for r in body if isinstance(r, TopicRecord))
            return kind, [*records, BeginTransactionRecord(name=f"tx{n}"), *body, end]
        return kind, [*records, *self._body(kind, n)]

    def _body(self, kind: str, n: int) -> list[object]:
        rng = self.scheduler.random
        if kind == "broker":
            broker_id = rng.randint(1, 5)
            records: list[object] = [register_broker(broker_id, epoch=n, fenced=rng.random() < 0.5)]
            follow = rng.choice(["fence", "unfence", "shutdown", "none"])
            if follow == "fence":
                records.append(FenceBrokerRecord(id=broker_id, epoch=n))
            elif follow == "unfence":
                records.append(UnfenceBrokerRecord(id=broker_id, epoch=n))
            elif follow == "shutdown":
                records.append(
                    BrokerRegistrationChangeRecord(broker_id=broker_id, broker_epoch=n, in_controlled_shutdown=1)
                )
            return records
        if kind in ("topic", "delete"):
            records = [topic(f"t{n}", n)]
            for p in range(rng.randint(1, 3)):
                replicas = tuple(rng.sample(range(1, 6), rng.randint(1, 3)))
                records.append(partition(n, p, replicas=replicas))
                records.append(change(n, p, isr=replicas[:1]))
                records.append(change(n, p, leader=rng.choice([-1, *replicas])))
            records.append(ConfigRecord(resource_type=_TOPIC, resource_name=f"t{n}", name="min.insync.replicas", value="2"))
            if kind == "delete":
                self.vanished_topics.add(f"t{n}")
                records.append(RemoveTopicRecord(topic_id=topic_id(n)))
            return records
        if kind == "config":
            value = rng.choice([None, "604800000", "3600000"])
            return [ConfigRecord(resource_type=_BROKER, resource_name=str(rng.randint(1, 3)), name="log.retention.ms", value=value)]
        # The sequence only grows, so blocks never go back even across leaders.
        return [ProducerIdsRecord(broker_id=1, broker_epoch=n, next_producer_id=n * 1000)]


def _run(seed: int) -> tuple[SimCluster, _Workload]:
    scheduler = Scheduler(seed=seed)
    rng = scheduler.random
    voters = rng.choice([3, 3, 5])
    rule = LinkRule(
        drop_rate=rng.choice([0.0, 0.01, 0.05]),
        duplicate_rate=rng.choice([0.0, 0.03]),
        delay_min_ms=1,
        delay_max_ms=rng.choice([2, 10, 100]),
    )
    cluster = SimCluster(
        scheduler,
        voter_ids=range(1, voters + 1),
        observer_ids=[voters + 1],
        # A tiny retention: the leader cleans its log behind each snapshot, so a node that was
        # away long enough must load a snapshot (FetchSnapshot) to catch up.
        raft_config=RaftConfig(retention_max_bytes=4096),
        link_rule=rule,
        invariants=default_invariants(),
        wire_format=seed % 4 == 0,
        state_machine_factory=_MetadataStateMachine,
    )
    cluster.start_all()
    workload = _Workload(scheduler)

    def append() -> None:
        leader = cluster.leader()
        if leader is None or leader.shutting_down:
            return
        machine = _machine(leader)
        if machine.claimed_epoch is None or machine.pending:
            return
        _, records = workload.operation(machine.loader.image)
        machine.pending = [encode_metadata_record(record) for record in records]
        cluster.append_on_leader(len(machine.pending))

    appending = scheduler.every(_APPEND_PERIOD_MS, append, label="append metadata", jitter_ms=_APPEND_PERIOD_MS, delay_ms=1)
    scheduler.run_until(cluster.has_consistent_leader, what="first leader", within_ms=30_000)
    everyone = [ADMIN_ID, *cluster.all_ids]
    for _ in range(5):
        scheduler.run_for(rng.randint(300, 2500))
        victim = rng.choice(cluster.all_ids)
        action = rng.choice(["kill", "isolate", "restart", "heal"])
        if action == "kill" and victim in cluster.running:
            cluster.kill(victim)
        elif action == "isolate":
            cluster.network.isolate(victim, others=everyone)
        elif action == "restart" and victim not in cluster.running:
            cluster.start(victim)
        else:
            cluster.network.heal()
    # A node away for a while: the others write past it and clean their logs behind a snapshot.
    away = rng.choice(cluster.all_ids)
    cluster.kill(away)
    scheduler.run_for(4000)
    cluster.network.heal()
    for node_id in cluster.all_ids:
        if node_id not in cluster.running:
            cluster.start(node_id)
    target = cluster.max_high_watermark() + 10
    scheduler.run_until(lambda: cluster.all_reached(target), what=f"progress past {target}", within_ms=30_000)
    appending.cancel()

    def converged() -> bool:
        nodes = list(cluster.running.values())
        ends = {n.raft.log_end_offset for n in nodes} | {n.raft.high_watermark for n in nodes}
        offsets = {_machine(n).loader.last_applied_offset for n in nodes}
        return len(ends) == 1 and offsets == {ends.pop() - 1}

    scheduler.run_until(converged, what="every node applied the whole log", within_ms=30_000)
    cluster.check_invariants()
    return cluster, workload


@pytest.mark.parametrize("seed", range(32))
def test_every_node_builds_the_same_image_bytes_under_faults(seed: int) -> None:
    cluster, workload = _run(seed)
    machines = [_machine(node) for node in cluster.running.values()]
    images = {m.node_id: m.loader.image for m in machines}
    reference = images[min(images)]
    assert workload.sequence > 10
    assert reference.features.metadata_version == 25
    assert reference.cluster.brokers or reference.topics.topics_by_id
    for node_id, image in images.items():
        assert image.offset == reference.offset, node_id
        assert image.to_bytes() == reference.to_bytes(), f"node {node_id} differs from node {min(images)}"
    # The invariant compared images at many committed offsets along the way, not only at the end.
    assert all(m.applied and m.applied[-1][0] == reference.offset for m in machines)
    assert sum(len(m.applied) for m in machines) > 20


def test_the_runs_load_snapshots_and_cover_transactions_and_deletions() -> None:
    """Guards the workload above against silently testing less: across a few seeds, snapshots were
    loaded (not only written), and deleted topics and aborted transactions left nothing behind while
    other topics were committed."""
    snapshot_loads = 0
    for seed in range(4):
        cluster, workload = _run(seed)
        snapshot_loads += sum(_machine(node).snapshot_loads for node in cluster.running.values())
        image = _machine(next(iter(cluster.running.values()))).loader.image
        names = {t.name for t in image.topics.topics_by_id.values()}
        assert names
        assert workload.vanished_topics
        assert not names & workload.vanished_topics
    assert snapshot_loads > 0
