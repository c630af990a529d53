"""KIP-853 through the operator with brokers and a live producer: `kraftwerk up` runs three engine
controllers and three engine brokers; a kafka-python producer (acks=all, idempotence) in its own
process writes a partition on the three brokers all along; the spec goes from three controllers to
five (two observers formatted `--no-initial-controllers`, then AddRaftVoter one at a time) and back
to three (RemoveRaftVoter one at a time, the active controller last, then the pods stop).

What a user of the cluster must see: no write fails and every acknowledged record is read back by
offset; no node restarts (the same processes throughout); and the quorum's leader epoch moves only
when the leader itself is the voter removed (Kafka's leader keeps leading until its own removal
commits, then resigns): adding and removing followers elects nobody."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path

import pytest

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_operator.runtime.kubernetes import read_log_dir_ids

from .live_cluster import LiveCluster, settled, three_and_three
from .test_quorum_change_process import current_voters
from .workload import producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

# Three times Kafka's default fetch timeout: a controller stalled by a loaded machine must not look
# like a lost leader (the test asserts that no election happens but for the leader's own removal).
CLUSTER = three_and_three("voters", config={"controller.quorum.fetch.timeout.ms": "6000"})

TOPIC = "steady"


def _controllers(replicas: int):
    def change(doc: dict) -> None:
        doc["spec"]["nodePools"][0]["replicas"] = replicas
    return change


def test_controllers_three_to_five_to_three_with_brokers_under_a_live_producer(tmp_path: Path) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="voters")
    samples: list[tuple[int, int, tuple[int, ...]]] = []  # (leader, epoch, voters) from every status read

    def voters_are(wanted: int):
        def check() -> dict | None:
            status = cluster.status()
            quorum = (status or {}).get("quorum") or {}
            if quorum:
                samples.append((quorum["leaderId"], quorum["leaderEpoch"], tuple(sorted(v["id"] for v in quorum["voters"]))))
            if not settled(status) or len(quorum.get("voters", [])) != wanted:
                return None
            controllers = [n["id"] for n in status["nodes"] if "controller" in n["roles"]]
            return status if len(controllers) == wanted and status["controllers"] == f"{wanted}/{wanted}" else None
        return check

    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        start = cluster.wait("three voters", voters_are(3), timeout_s=120)
        for broker in (3, 4, 5):
            # What the Kubernetes runtime reads for a volume a broker formatted itself: the broker's
            # own answer (its /kraftwerk/status) names each log directory with the id on disk.
            port = cluster.config(broker)["kraftwerk.metrics.port"]
            answer = asyncio.run(read_log_dir_ids(f"http://127.0.0.1:{port}/kraftwerk/status", timeout_s=30))
            data = Path(cluster.config(broker)["log.dirs"])  # data-0, as the runtime configured it
            meta = read_meta_properties(data)
            assert meta.directory_id is not None
            assert answer == (start["clusterId"], {str(data): to_kafka_str(meta.directory_id)}), answer
        pids = {i: cluster.pid(i) for i in range(6)}
        partition_before = cluster.partition(TOPIC)
        with producing(bootstrap, TOPIC, cluster.acks):
            cluster.more_acks("the producer's first acks")
            cluster.edit(_controllers(5))
            grown = cluster.wait("five voters", voters_are(5), timeout_s=900)
            added = sorted({v["id"] for v in grown["quorum"]["voters"]} - {0, 1, 2})
            cluster.more_acks("acks with five voters")
            cluster.edit(_controllers(3))
            shrunk = cluster.wait("three voters again", voters_are(3), timeout_s=900)
            cluster.more_acks("acks after the change")
        stored = read_partition(bootstrap, TOPIC)
        partition_after = cluster.partition(TOPIC)
        voters_line = current_voters(cluster.controllers([0]))
        still = {i: cluster.pid(i) for i in range(6)}
    acked, lost, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 60 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    # Two controllers joined and left again, one at a time, and nothing restarted for it.
    assert len(added) == 2, grown["quorum"]
    assert sorted(v["id"] for v in shrunk["quorum"]["voters"]) == [0, 1, 2]
    assert [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("AddVoter")] == added
    assert sorted({int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RemoveVoter")}) == added
    assert cluster.events("RestartNode") == []
    assert still == pids, (pids, still)
    assert all(f'"id": {i}' in voters_line for i in range(3)) and not any(f'"id": {i}' in voters_line for i in added)
    # The leader epoch moves only when the voter removed is the leader itself.
    known = [s for s in samples if s[0] >= 0]
    epochs = []
    for before, after in itertools.pairwise(known):
        if after[1] != before[1]:
            epochs.append((before, after))
            assert before[0] in added and before[0] not in after[2], (before, after)
    if not epochs:
        assert known[-1][1] == start["quorum"]["leaderEpoch"]
    print(f"acks {acked}, quorum epoch changes {epochs}, partition {partition_before} -> {partition_after}")
