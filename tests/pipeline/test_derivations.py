"""The derived tables on a hand-built log that walks one partition through every kind of change
the real-cluster test does not reach: min ISR from a topic config, an offline spell, a reassignment
finished and one cancelled, a directory assignment, a controlled shutdown, an unregistration, voter
changes (one legal step, then two voters at once) and the topic's deletion."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderVoter
from kio.schema.voters_record.v0 import VotersRecord
from kio.schema.voters_record.v0.data import Endpoint, KRaftVersionFeature, Voter
from kio.static.primitive import i16, i32, u16
from log_builder import TS_MS, node_dir, write_segment
from pyspark.sql import SparkSession

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.records import (
    BrokerRegistrationChangeRecord,
    ConfigRecord,
    FeatureLevelRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnregisterBrokerRecord,
)
from kraft_pipeline.job import derive

# One derivation of every table on a loaded 2-core machine takes minutes, not the default 300 s.
pytestmark = pytest.mark.timeout(900)

T = uuid.UUID(int=0xABC)
TOPIC = "orders"


def change(**fields: Any) -> PartitionChangeRecord:
    return PartitionChangeRecord(partition_id=0, topic_id=T, **fields)


def voters(*ids: int) -> VotersRecord:
    return VotersRecord(version=i16(0), voters=tuple(
        Voter(voter_id=i32(i), voter_directory_id=uuid.UUID(int=i),
              endpoints=(Endpoint(name="CONTROLLER", host="localhost", port=u16(9000 + i)),),
              k_raft_version_feature=KRaftVersionFeature(min_supported_version=i16(0), max_supported_version=i16(1)))
        for i in ids
    ))


DIRS = {n: uuid.UUID(int=100 + n) for n in range(1, 5)}
LOG: list[tuple[int, list[object]]] = [
    (1, [LeaderChangeMessage(version=i16(0), leader_id=i32(1000), voters=(LeaderVoter(voter_id=i32(1000)),),
                             granting_voters=())]),                                           # 0
    (1, [FeatureLevelRecord(name="metadata.version", feature_level=27)]),                     # 1
    (1, [RegisterBrokerRecord(broker_id=b, incarnation_id=uuid.UUID(int=b), broker_epoch=10 + b, end_points=(),
                              features=(), rack=None, fenced=False) for b in (1, 2, 3, 4)]),   # 2-5
    (1, [TopicRecord(name=TOPIC, topic_id=T),
         PartitionRecord(partition_id=0, topic_id=T, replicas=(1, 2, 3), isr=(1, 2, 3), leader=1, leader_epoch=0,
                         partition_epoch=0, removing_replicas=(), adding_replicas=())]),      # 6-7
    (1, [ConfigRecord(resource_type=2, resource_name=TOPIC, name="min.insync.replicas", value="3")]),  # 8
    (1, [change(isr=(1, 2))]),                                                                # 9: URP, under min ISR
    (1, [change(leader=-1, isr=(1,))]),                                                       # 10: offline
    (1, [change(leader=1, isr=(1, 2, 3))]),                                                   # 11: healthy
    (1, [change(replicas=(1, 2, 3, 4), adding_replicas=(4,), removing_replicas=(3,))]),       # 12: reassign 3 -> 4
    (1, [change(replicas=(1, 2, 4), isr=(1, 2, 4), adding_replicas=(), removing_replicas=(),
                directories=(DIRS[1], DIRS[2], DIRS[4]))]),                                   # 13: finished
    (1, [change(replicas=(1, 2, 4, 3), adding_replicas=(3,), removing_replicas=(4,),
                directories=(DIRS[1], DIRS[2], DIRS[4], DIRS[3]))]),                          # 14: reassign 4 -> 3
    (1, [change(replicas=(1, 2, 4), adding_replicas=(), removing_replicas=(),
                directories=(DIRS[1], DIRS[2], DIRS[4]))]),                                   # 15: cancelled
    (1, [change(directories=(DIRS[2], DIRS[2], DIRS[4]))]),                                   # 16: directory moved
    (1, [BrokerRegistrationChangeRecord(broker_id=3, broker_epoch=13, in_controlled_shutdown=1)]),  # 17
    (1, [UnregisterBrokerRecord(broker_id=3, broker_epoch=13)]),                              # 18
    (1, [voters(1000, 1001)]),                                                                # 19
    (1, [voters(1000, 1001, 1002)]),                                                          # 20
    (1, [voters(1000, 1003, 1004)]),                                                          # 21: two at once
    (1, [RemoveTopicRecord(topic_id=T)]),                                                     # 22
]
# log_builder stamps batch i with TS_MS + i seconds; every record carries its batch's time
TS = {}
for _index, (_, _records) in enumerate(LOG):
    for _ in _records:
        TS[len(TS)] = TS_MS + 1000 * _index


@pytest.fixture(scope="module")
def tables(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every derived table, collected once."""
    root = Path(tmp_path_factory.mktemp("derivations"))
    for node_id in (1, 2, 3):
        write_segment(node_dir(root, node_id), LOG)
    derived = derive(spark, [str(root)])
    return {
        name: [r.asDict(recursive=True) for r in derived.table(name).collect()]
        for name in ("events", "partition_history", "urp_history", "urp_partition_totals", "dr_checks")
    }


def test_every_kind_of_event_at_its_offset(tables: dict[str, list[dict[str, Any]]]) -> None:
    events = sorted((e["offset"], e["event"]) for e in tables["events"])
    assert events == [
        (0, "controller_elected"),
        (1, "feature_level_changed"),
        (2, "broker_registered"), (3, "broker_registered"), (4, "broker_registered"), (5, "broker_registered"),
        (6, "topic_created"),
        (7, "partition_created"),
        (8, "config_changed"),
        (9, "isr_shrunk"),
        (10, "isr_shrunk"), (10, "leader_changed"),
        (11, "isr_expanded"), (11, "leader_changed"),
        (12, "reassignment_started"),
        (13, "isr_expanded"), (13, "isr_shrunk"), (13, "reassignment_finished"),
        (14, "reassignment_started"),
        (15, "reassignment_cancelled"),
        (16, "directory_assigned"),
        (17, "broker_controlled_shutdown"),
        (18, "broker_unregistered"),
        (19, "voters_changed"), (20, "voters_changed"), (21, "voters_changed"),
        (22, "topic_deleted"),
    ]
    by_kind = {e["event"]: e for e in tables["events"]}
    assert by_kind["config_changed"]["resource"] == f"topic:{TOPIC}"
    assert (by_kind["config_changed"]["name"], by_kind["config_changed"]["value"]) == ("min.insync.replicas", "3")
    assert by_kind["topic_deleted"]["topic"] == TOPIC
    assert by_kind["reassignment_finished"]["replicas"] == [1, 2, 4]
    assert by_kind["broker_unregistered"]["node_id"] == 3
    assert by_kind["controller_elected"]["leader"] == 1000


def test_history_keeps_what_a_change_leaves_null(tables: dict[str, list[dict[str, Any]]]) -> None:
    history = sorted(tables["partition_history"], key=lambda r: r["start_offset"])
    by_start = {r["start_offset"]: r for r in history}
    # offset 9 set only the ISR: leader, replicas and leader epoch stand, partition epoch moves
    assert (by_start[9]["leader"], by_start[9]["replicas"], by_start[9]["isr"]) == (1, [1, 2, 3], [1, 2])
    assert (by_start[9]["leader_epoch"], by_start[9]["partition_epoch"]) == (0, 1)
    # naming a leader (even "none") bumps the leader epoch
    assert (by_start[10]["leader"], by_start[10]["leader_epoch"]) == (-1, 1)
    assert (by_start[11]["leader"], by_start[11]["leader_epoch"]) == (1, 2)
    assert by_start[12]["adding_replicas"] == [4] and by_start[12]["isr"] == [1, 2, 3]
    assert by_start[16]["directories"] == [to_kafka_str(DIRS[2]), to_kafka_str(DIRS[2]), to_kafka_str(DIRS[4])]
    # each interval ends where the next begins; the deletion closes the last
    assert [(r["start_offset"], r["end_offset"]) for r in history] == [
        (7, 9), (9, 10), (10, 11), (11, 12), (12, 13), (13, 14), (14, 15), (15, 16), (16, 22)
    ]
    assert history[-1]["ended_by"] == "RemoveTopicRecord" and history[-1]["end_ms"] == TS[22]


def test_urp_counts_and_times_follow_the_topics_min_isr(tables: dict[str, list[dict[str, Any]]]) -> None:
    counts = {r["offset"]: (r["under_replicated"], r["under_min_isr"], r["offline"]) for r in tables["urp_history"]}
    assert counts[7] == (0, 0, 0)
    assert counts[9] == (1, 1, 0)       # ISR 2 of 3, min.insync.replicas=3
    assert counts[10] == (1, 1, 1)      # no leader
    assert counts[11] == (0, 0, 0)
    assert counts[12] == (1, 0, 0)      # 4 replicas while 4 catches up, ISR 3
    assert counts[22] == (0, 0, 0)      # deleted
    (totals,) = tables["urp_partition_totals"]
    assert totals["offline_ms"] == TS[11] - TS[10]
    assert totals["under_min_isr_ms"] == TS[11] - TS[9]
    assert totals["under_replicated_ms"] == (TS[11] - TS[9]) + (TS[13] - TS[12]) + (TS[15] - TS[14])


def test_voter_history_fails_when_two_voters_change_at_once(tables: dict[str, list[dict[str, Any]]]) -> None:
    checks = {c["check"]: c for c in tables["dr_checks"]}
    voter_check = checks["voter_set_history"]
    assert voter_check["status"] == "fail"
    assert "offset 21: [1000, 1001, 1002] -> [1000, 1003, 1004]" in voter_check["evidence"]
    assert checks["log_agreement"]["status"] == "pass" and checks["log_agreement"]["value"] == 22
