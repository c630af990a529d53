"""KIP-853 through the operator with brokers and a live workload: `kraftwerk up` runs three engine
controllers (each in its own node pool, so the spec can name which one leaves) and three engine
brokers; a kafka-python producer (acks=all, idempotence) and a consumer in a group, each in its own
process, write and read a partition on the three brokers all along, and the lifecycle checker
samples the cluster. The spec goes from three controllers to five (a pool of two more: two
observers formatted `--no-initial-controllers`, then AddRaftVoter one at a time) and back to three:
the pool of the controller that leads the quorum then goes to zero and the new pool to one, so the
active controller is one of the two that leave (RemoveRaftVoter one at a time, the active controller
last, then the pods stop).

What a user of the cluster must see: no write fails, every acknowledged record is read back by
offset and delivered to the group; no node restarts (the same processes throughout); the quorum's
leader epoch moves exactly once, for the removal of the active controller, which hands the
leadership over as Kafka's does: once its removal commits it resigns and sends EndQuorumEpoch to
the staying voters, whose most caught-up one stands at once instead of waiting out
`controller.quorum.fetch.timeout.ms`; adding and removing followers elects nobody."""

from __future__ import annotations

import asyncio
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_operator.runtime.kubernetes import read_log_dir_ids

from .live_cluster import LiveCluster, settled, three_and_three
from .test_quorum_change_process import quorum_status
from .workload import read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

# Three times Kafka's default fetch timeout: a controller stalled by a loaded machine must not look
# like a lost leader (the test asserts that no election happens but for the leader's own removal).
FETCH_TIMEOUT_MS = 6000


def _one_pool_per_controller(spec_text: str) -> str:
    """The three controllers of `three_and_three` in three pools of one (ids 0, 1, 2 in this order:
    new ids are given pool by pool), so the spec can take any one of them away."""
    doc = yaml.safe_load(spec_text)
    controllers, *others = doc["spec"]["nodePools"]
    doc["spec"]["nodePools"] = [{**controllers, "name": f"controller-{i}", "replicas": 1} for i in range(3)] + others
    return yaml.safe_dump(doc)


# Three times Kafka's default fetch timeout: a controller stalled by a loaded machine must not look
# like a lost leader (the test asserts that no election happens but for the leader's own removal).
CLUSTER = _one_pool_per_controller(
    three_and_three("voters", config={"controller.quorum.fetch.timeout.ms": str(FETCH_TIMEOUT_MS)}))

TOPIC = "steady"
MORE = "more-controllers"


def _grow(doc: dict) -> None:
    pool = next(p for p in doc["spec"]["nodePools"] if p["name"] == "controller-0")
    doc["spec"]["nodePools"].append({**pool, "name": MORE, "replicas": 2})


def _shrink(leader: int):
    def change(doc: dict) -> None:
        for pool in doc["spec"]["nodePools"]:
            if pool["name"] == f"controller-{leader}":
                pool["replicas"] = 0
            elif pool["name"] == MORE:
                pool["replicas"] = 1
    return change


def _end_quorum_epochs(cluster: LiveCluster, node_id: int) -> float:
    """EndQuorumEpoch requests the controller has received (`kafka_network_requests_total`)."""
    port = cluster.config(node_id)["kraftwerk.metrics.port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("kafka_network_requests_total{") and 'request="EndQuorumEpoch"' in line)


def _role_at(cluster: LiveCluster, node_id: int, role: str, epoch: int) -> datetime:
    """When the node's server.log says it took `role` in `epoch` (the engine's raft log line)."""
    line = next(line for line in (cluster.node_dir(node_id) / "server.log").read_text().splitlines()
                if f"Node {node_id} is now {role} in epoch {epoch} " in line)
    return datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f")


def test_controllers_three_to_five_to_three_removing_the_active_controller_under_a_live_workload(
        tmp_path: Path) -> None:
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
        with cluster.workload(bootstrap, TOPIC) as checker:
            cluster.more_acks("the producer's first acks")
            cluster.edit(_grow)
            grown = cluster.wait("five voters", voters_are(5), timeout_s=900)
            added = sorted({v["id"] for v in grown["quorum"]["voters"]} - {0, 1, 2})
            cluster.more_acks("acks with five voters")
            # The active controller, as the quorum itself says, is made one of the two that leave.
            before = quorum_status(cluster.controllers([0, 1, 2, *added]))
            leader, epoch = int(before["LeaderId"]), int(before["LeaderEpoch"])
            staying = sorted({0, 1, 2, added[0]} - {leader})
            received = {i: _end_quorum_epochs(cluster, i) for i in staying}
            cluster.edit(_shrink(leader))
            shrunk = cluster.wait("three voters again", voters_are(3), timeout_s=900)
            cluster.more_acks("acks after the change")
        stored = read_partition(bootstrap, TOPIC)
        after = quorum_status(cluster.controllers(staying))
        handed_over = {i: _end_quorum_epochs(cluster, i) for i in staying}
        new_leader = int(after["LeaderId"])
        resigned_at = _role_at(cluster, leader, "Resigned", epoch)
        elected_at = _role_at(cluster, new_leader, "Leader", epoch + 1)
        still = {i: cluster.pid(i) for i in range(6) if i != leader}
    acked, lost, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 60 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    # Two controllers joined, then the highest new one and the active controller left, in this order
    # (the active one last), and nothing restarted for it.
    assert added == [6, 7], grown["quorum"]
    assert leader in (0, 1, 2) and start["quorum"]["leaderEpoch"] == epoch, (start["quorum"], before)
    assert sorted(v["id"] for v in shrunk["quorum"]["voters"]) == staying
    assert [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("AddVoter")] == added
    removals = cluster.events("RemoveVoter")
    assert [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in removals] == [7, leader], removals
    assert "(the active controller: it resigns once the removal commits)" in removals[1], removals
    assert cluster.events("RestartNode") == []
    assert still == {i: pids[i] for i in still}, (pids, still)
    voters_line = after["CurrentVoters"]
    assert all(f'"id": {i}' in voters_line for i in staying) and not any(f'"id": {i}' in voters_line for i in (leader, 7))
    # One election, the one the removal of the active controller asks for: the epoch moved once,
    # from the removed leader to a staying voter; every status read saw no other epoch.
    assert int(after["LeaderEpoch"]) == epoch + 1 and new_leader in staying, after
    assert {s[1] for s in samples if s[0] >= 0} <= {epoch, epoch + 1}, samples
    # Handed over with EndQuorumEpoch: the staying voters had received none before, the new leader
    # received the resigned leader's (the election then starts at once, not a fetch timeout later).
    assert all(count == 0 for count in received.values()), received
    assert handed_over[new_leader] >= 1, handed_over
    gap_ms = (elected_at - resigned_at).total_seconds() * 1000
    print(f"acks {acked}, leader {leader} (epoch {epoch}) removed, {new_leader} leads epoch {epoch + 1} "
          f"{gap_ms:.0f} ms after it resigned (fetch timeout {FETCH_TIMEOUT_MS} ms), EndQuorumEpoch received "
          f"{handed_over}, the checker: {checker.summary()}")
