"""A single-node quorum controller driven the way the shell drives it: every write's records are
committed at once, so each test step can check the records written, the response, and the state
they replayed into.

`FakeRaft` is the raft layer as the controller sees it through its append port. Like the real one
it owns the offsets, and it writes control batches of its own between the controller's appends
(a LeaderChangeMessage when the epoch starts, then one control record after every batch the
controller schedules, as voter changes and leader changes do), so a controller that predicted its
own offsets would apply records where they do not land."""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.alter_partition.v3 import request as ap
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64, u16

from kraft_engine.controller import AppendRefused, QuorumController, RecordAndVersion
from kraft_engine.metadata import PartitionRegistration, VersionRange
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import FeatureLevelRecord, feature_versions

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
LATEST_MV = 25  # 4.0-IV3
NO_TIMEOUT = datetime.timedelta(seconds=30)


@dataclass(frozen=True)
class FakeBatch:
    base_offset: int
    epoch: int
    records: tuple[RecordAndVersion, ...]  # empty: one of raft's own control records
    last_offset: int


class FakeRaft:
    """The controller's RaftAppendPort over an in-memory log that commits when told to."""

    def __init__(self, *, control_between_appends: bool = True) -> None:
        self.control_between_appends = control_between_appends
        self.log: list[FakeBatch] = []
        self.delivered = 0  # batches handed to the controller as committed
        self.refuse = False
        self._next_offset = 0
        self._prepared: list[FakeBatch] = []
        self.prepare_calls = 0

    def start_epoch(self, epoch: int, *, log_end_offset: int) -> None:
        """This node was elected for `epoch` with its log ending at `log_end_offset`: raft writes its
        LeaderChangeMessage there first."""
        self._next_offset = log_end_offset
        self.control_batch(epoch)

    @property
    def prepared(self) -> list[FakeBatch]:
        """The batches reserved but never let go to the log (never written if never scheduled)."""
        return list(self._prepared)

    def control_batch(self, epoch: int) -> None:
        """One raft control record (LeaderChangeMessage, VotersRecord, ...) takes the next offset."""
        self.log.append(FakeBatch(self._next_offset, epoch, (), self._next_offset))
        self._next_offset += 1

    # -- RaftAppendPort ------------------------------------------------------------------------
    def next_append_offset(self) -> int:
        return self._next_offset

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        self.prepare_calls += 1
        if self.refuse:
            raise AppendRefused("refused by the test")
        if self._prepared:
            raise AssertionError("a prepared append was never scheduled")
        last_offsets = []
        for index, records in enumerate(batches):
            if index and self.control_between_appends:
                # Raft may place its own control record between a write's batches (the real one
                # does not within one call); the controller must apply each where it was placed.
                self._prepared.append(FakeBatch(self._next_offset, epoch, (), self._next_offset))
                self._next_offset += 1
            batch = FakeBatch(self._next_offset, epoch, tuple(records), self._next_offset + len(records) - 1)
            self._next_offset = batch.last_offset + 1
            self._prepared.append(batch)
            last_offsets.append(batch.last_offset)
        return last_offsets

    def schedule_prepared_append(self) -> None:
        batches, self._prepared = self._prepared, []
        if not batches:
            raise AssertionError("nothing was prepared")
        self.log.extend(batches)
        if self.control_between_appends:
            self.control_batch(batches[-1].epoch)

    # -- committing ----------------------------------------------------------------------------
    def commit(self, controller: QuorumController, *, now_ms: int = 0) -> list[FakeBatch]:
        """Deliver every batch not yet delivered as committed, control batches included; return them."""
        batches = self.log[self.delivered :]
        self.delivered = len(self.log)
        for batch in batches:
            records = tuple(r.record for r in batch.records)
            controller.handle_commit(CommittedBatch(batch.base_offset, batch.epoch, records, batch.last_offset,
                                                    append_timestamp_ms=now_ms))
        return batches

    def discard_uncommitted(self) -> None:
        """A new leader truncated what this one wrote but did not commit."""
        del self.log[self.delivered :]
        self._next_offset = self.log[-1].last_offset + 1 if self.log else 0


class Harness:
    def __init__(self, *, mv: int = LATEST_MV, seed: int = 1, features: Mapping[str, int] | None = None,
                 supported: Mapping[str, tuple[int, int]] | None = None, **options: object) -> None:
        """`features`: levels the bootstrap finalizes besides metadata.version (as kraft storage
        format does); `supported`: this controller's ranges (default: what the engine supports)."""
        self.mv = mv
        self.raft = FakeRaft()
        bootstrap = [RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=mv), 0)]
        bootstrap += [RecordAndVersion(FeatureLevelRecord(name=name, feature_level=level), 0)
                      for name, level in sorted((features or {}).items())]
        self.controller = QuorumController(
            node_id=3000,
            raft=self.raft,
            quorum_node_ids=(3000,),
            bootstrap_records=bootstrap,
            local_supported_features={
                **{name: VersionRange(low, high) for name, (low, high) in (
                    supported or feature_versions.supported_ranges(unstable_enabled=False)).items()},
                "metadata.version": VersionRange(7, LATEST_MV),
            },
            cluster_id=CLUSTER_ID,
            rng=random.Random(seed),
            **options,  # type: ignore[arg-type]
        )
        self.now_ms = 0
        self.written: list[object] = []
        self.versions: list[int] = []
        self.incarnations: dict[int, uuid.UUID] = {}
        self.epochs: dict[int, int] = {}
        self.log_dirs: dict[int, tuple[uuid.UUID, ...]] = {}
        self.raft.control_batch(1)  # the LeaderChangeMessage that opens epoch 1
        self.controller.handle_leader_change(leader_id=3000, epoch=1, now_ms=0, raft_is_leader=True)
        self.commit()

    def commit(self) -> dict[int, object]:
        """Commit everything appended so far; return completions (and failures) by token."""
        effects = self.controller.take_effects()
        self.written = []
        self.versions = []
        for batch in self.raft.commit(self.controller, now_ms=self.now_ms):
            self.written.extend(r.record for r in batch.records)
            self.versions.extend(r.version for r in batch.records)
        completed = dict(effects.completed + self.controller.take_effects().completed)
        completed.update({f.token: f.error for f in effects.failed})
        return completed

    def run(self, token: int) -> object:
        return self.commit()[token]

    # -- brokers ---------------------------------------------------------------------------

    def register(self, broker_id: int, *, rack: str | None = None, dirs: int = 1, cluster_id: str = CLUSTER_ID,
                 incarnation: uuid.UUID | None = None, supported: Mapping[str, tuple[int, int]] | None = None,
                 previous_epoch: int = -1) -> object:
        """`supported`: feature ranges the broker sends besides metadata.version; `previous_epoch`:
        the epoch its last incarnation shut down cleanly with (-1: none)."""
        incarnation = incarnation or self.incarnations.setdefault(broker_id, uuid.uuid4())
        log_dirs = self.log_dirs.setdefault(broker_id, tuple(uuid.uuid4() for _ in range(dirs)))
        token = self.controller.register_broker(BrokerRegistrationRequest(
            broker_id=BrokerId(broker_id), cluster_id=cluster_id, incarnation_id=incarnation,
            listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092 + broker_id),
                                security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(7),
                              max_supported_version=i16(LATEST_MV)),
                      *(Feature(name=name, min_supported_version=i16(low), max_supported_version=i16(high))
                        for name, (low, high) in sorted((supported or {}).items()))),
            rack=rack, log_dirs=log_dirs, previous_broker_epoch=i64(previous_epoch),
        ), now_ms=self.now_ms)
        result = self.run(token)
        if hasattr(result, "broker_epoch"):
            self.epochs[broker_id] = result.broker_epoch
        return result

    def heartbeat(self, broker_id: int, *, want_fence: bool = False, want_shut_down: bool = False,
                  offline_dirs: Sequence[uuid.UUID] = (), offset: int | None = None) -> object:
        token = self.controller.broker_heartbeat(BrokerHeartbeatRequest(
            broker_id=BrokerId(broker_id), broker_epoch=i64(self.epochs[broker_id]),
            current_metadata_offset=i64(self.controller.last_stable_offset() if offset is None else offset),
            want_fence=want_fence, want_shut_down=want_shut_down, offline_log_dirs=tuple(offline_dirs),
        ), now_ms=self.now_ms)
        return self.run(token)

    def unfenced(self, *brokers: int, racks: Mapping[int, str] | None = None, dirs: int = 1) -> Harness:
        for broker in brokers:
            self.register(broker, rack=(racks or {}).get(broker), dirs=dirs)
        for broker in brokers:
            self.heartbeat(broker)
        return self

    # -- topics ----------------------------------------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, rf: int = 1, *,
                     assignments: Sequence[Sequence[int]] = (), configs: Mapping[str, str] | None = None) -> object:
        from kio.schema.create_topics.v7.request import CreatableReplicaAssignment

        topic = CreatableTopic(
            name=TopicName(name),
            num_partitions=i32(-1 if assignments else partitions),
            replication_factor=i16(-1 if assignments else rf),
            assignments=tuple(CreatableReplicaAssignment(partition_index=i32(i),
                                                         broker_ids=tuple(BrokerId(b) for b in replicas))
                              for i, replicas in enumerate(assignments)),
            configs=tuple(CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()),
        )
        [result] = self.run(self.controller.create_topics(CreateTopicsRequest(topics=(topic,))))  # type: ignore[misc]
        return result

    def topic_id(self, name: str) -> uuid.UUID:
        topic_id = self.controller.replication_control.topic_id(name)
        assert topic_id is not None
        return topic_id

    def partition(self, name: str, partition_id: int = 0) -> PartitionRegistration:
        partition = self.controller.replication_control.partition(self.topic_id(name), partition_id)
        assert partition is not None
        return partition

    def alter_isr(self, name: str, partition_id: int, isr: Sequence[int]) -> object:
        """The partition's leader sends AlterPartition with `isr`."""
        partition = self.partition(name, partition_id)
        token = self.controller.alter_partition(ap.AlterPartitionRequest(
            broker_id=BrokerId(partition.leader), broker_epoch=i64(self.epochs[partition.leader]),
            topics=(ap.TopicData(topic_id=self.topic_id(name), partitions=(ap.PartitionData(
                partition_index=i32(partition_id), leader_epoch=i32(partition.leader_epoch),
                new_isr_with_epochs=tuple(ap.BrokerState(broker_id=BrokerId(b), broker_epoch=i64(self.epochs[b]))
                                          for b in isr),
                leader_recovery_state=i8(0), partition_epoch=i32(partition.partition_epoch),
            ),)),),
        ))
        return self.run(token).topics[0].partitions[0]  # type: ignore[attr-defined]
