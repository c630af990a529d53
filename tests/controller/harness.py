"""A single-node quorum controller driven the way the shell drives it: every write's records are
committed at once, so each test step can check the records written, the response, and the state
they replayed into."""

from __future__ import annotations

import datetime
import random
import uuid
from collections.abc import Mapping, Sequence

from kio.schema.alter_partition.v3 import request as ap
from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i16, i32, i64, u16

from kraft_engine.controller import CommittedBatch, QuorumController, RecordAndVersion
from kraft_engine.metadata import PartitionRegistration, VersionRange
from kraft_engine.records import FeatureLevelRecord

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
LATEST_MV = 25  # 4.0-IV3
NO_TIMEOUT = datetime.timedelta(seconds=30)


class Harness:
    def __init__(self, *, mv: int = LATEST_MV, seed: int = 1, **options: object) -> None:
        self.mv = mv
        self.controller = QuorumController(
            node_id=3000,
            quorum_node_ids=(3000,),
            bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=mv), 0)],
            local_supported_features={"metadata.version": VersionRange(7, LATEST_MV)},
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
        self.controller.handle_leader_change(leader_id=3000, epoch=1, log_end_offset=0, now_ms=0)
        self.commit()

    def commit(self) -> dict[int, object]:
        """Commit everything appended so far; return completions (and failures) by token."""
        effects = self.controller.take_effects()
        self.written = []
        self.versions = []
        for append in effects.appends:
            records = tuple(r.record for r in append.records)
            self.written.extend(records)
            self.versions.extend(r.version for r in append.records)
            self.controller.handle_commit(CommittedBatch(append.base_offset, append.epoch, records, append.last_offset,
                                                         append_timestamp_ms=self.now_ms))
        completed = dict(effects.completed + self.controller.take_effects().completed)
        completed.update({f.token: f.error for f in effects.failed})
        return completed

    def run(self, token: int) -> object:
        return self.commit()[token]

    # -- brokers ---------------------------------------------------------------------------

    def register(self, broker_id: int, *, rack: str | None = None, dirs: int = 1, cluster_id: str = CLUSTER_ID,
                 incarnation: uuid.UUID | None = None) -> object:
        incarnation = incarnation or self.incarnations.setdefault(broker_id, uuid.uuid4())
        log_dirs = self.log_dirs.setdefault(broker_id, tuple(uuid.uuid4() for _ in range(dirs)))
        token = self.controller.register_broker(BrokerRegistrationRequest(
            broker_id=BrokerId(broker_id), cluster_id=cluster_id, incarnation_id=incarnation,
            listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092 + broker_id),
                                security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(7),
                              max_supported_version=i16(LATEST_MV)),),
            rack=rack, log_dirs=log_dirs,
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
