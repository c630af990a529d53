"""The lifecycle operations on Apache Kafka 4.1's own nodes: `kraftwerk up` runs three Kafka
controllers and three Kafka brokers from the jars (`scripts/fetch-kafka-jars`; skipped without them
or without java), formatted at metadata.version 4.0-IV3. The shared live workload runs all along
(`LiveCluster.workload`): a kafka-python producer (acks=all, idempotence) writing `life-0` (replicas
3, 4, 5, min.insync.replicas 2), a kafka-python consumer in a group reading it, and the lifecycle
checker (no two nodes down at once, no partition under min ISR, because of the operator). One
cluster walks the sequence a user's cluster would:

1. A roll held at min ISR: a topic `pinned` (replicas 3, 4, 5, min.insync.replicas 3) sits at its
   min ISR, and the spec's config changes. The roll restarts the three controllers one at a time
   (their gate is the quorum, not the partitions), then holds every broker: status.operation.blockedBy
   names `pinned-0` with its replicas, ISR and min ISR, a RollBlocked event says the same, and
   nothing restarts while it holds. Once the user lowers the topic's min.insync.replicas to 2
   (IncrementalAlterConfigs), the roll restarts the three brokers one at a time. Every node is
   restarted exactly once, controllers first, each by SIGTERM (Kafka's controlled shutdown) and
   none killed.
2. metadata.version 4.0-IV3 -> 4.1-IV1 after the roll: UpdateFeatures on Kafka's active controller,
   no restart; Kafka's own `kafka-features describe` reports the new level.
3. KIP-853 on Kafka's controllers: three -> four (the new one formatted by Kafka's StorageTool with
   `--no-initial-controllers`, caught up as an observer, then AddRaftVoter) -> three
   (RemoveRaftVoter, then its process stops); Kafka's own `kafka-metadata-quorum describe --status`
   lists the voters.
4. Downgrades: 4.1-IV1 -> 3.9-IV0 (across 4.0-IV1, a level that changed the metadata format) is
   refused in status with the sentence Kafka's controller refuses it with (asked with Kafka's own
   `kafka-features downgrade`); 4.1-IV1 -> 4.0-IV3 is sent as a safe downgrade and Kafka accepts it.

Every acknowledged record is read back by offset at the end, and the group's consumer delivered
each. The figures (phase times, acks) are
printed for docs/issue-13-checklist.md, not asserted.

Why no stalled follower holds the roll here, as it does on engine nodes: that needs
`broker.session.timeout.ms` longer than the stall, and a Kafka controller refuses a restarted
broker's registration while its previous session lives ("Another broker is registered with that
broker id", DuplicateBrokerRegistration); the broker gives up after
`initial.broker.registration.timeout.ms` (60 s) and exits, so every broker restart then waits for
the long session to expire."""

from __future__ import annotations

import re
import subprocess
import time
import warnings
from pathlib import Path

import pytest
import yaml

from kraft_operator.runtime.kafka_java import kafka_server_command
from kraft_operator.runtime.local import kafka_classpath

from .live_cluster import LiveCluster, create_topic, settled, three_and_three
from .workload import read_partition

pytestmark = [
    pytest.mark.process,
    pytest.mark.kafka_jars,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(kafka_classpath() is None,
                       reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH"),
]

NAME = "kafka-life"
TOPIC = "life"
UNSAFE_DOWNGRADE = "Refusing to perform the requested downgrade because it might delete metadata information"
PINNED = "pinned"  # RF 3 at min.insync.replicas 3: no broker of it may restart
CONTROLLERS, BROKERS = (0, 1, 2), (3, 4, 5)


def _spec() -> str:
    """Three Kafka controllers and three Kafka brokers at 4.0-IV3, Kafka's defaults otherwise."""
    doc = yaml.safe_load(three_and_three(NAME))
    doc["spec"]["metadataVersion"] = "4.0-IV3"
    for pool in doc["spec"]["nodePools"]:
        pool["implementation"] = "apache-kafka"
    return yaml.safe_dump(doc)


def _kafka_tool(main_class: str, *args: str, ok: bool = True) -> str:
    """One of Kafka's own tools from the jars; its output. It must succeed, or with `ok=False` fail."""
    found = kafka_classpath()
    assert found is not None
    command = [*kafka_server_command(found[0])[:-1], main_class, *args]
    for _ in range(3):
        result = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
        # A tool's admin client gives up after its 60 s default.api.timeout.ms; on a machine at
        # load 30 a JVM tool once timed out waiting for any controller ("Timed out waiting for a
        # node assignment. Call: listNodes"): asked again, not a refusal.
        if "Timed out waiting for a node assignment" not in result.stdout + result.stderr:
            break
    assert (result.returncode == 0) is ok, result.stdout + result.stderr
    return result.stdout + result.stderr


def _features(bootstrap: str, *args: str, ok: bool = True) -> str:
    """Kafka's own `kafka-features --bootstrap-controller BOOTSTRAP ARGS`."""
    return _kafka_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-controller", bootstrap, *args, ok=ok)


def _finalized(bootstrap: str) -> str:
    """metadata.version's FinalizedVersionLevel in Kafka's own `kafka-features describe`."""
    described = _features(bootstrap, "describe")
    found = re.search(r"Feature: metadata.version\s.*?FinalizedVersionLevel: (\S+)", described)
    assert found is not None, described
    return found.group(1)


def alter_min_isr(bootstrap: str, topic: str, *, min_isr: int) -> None:
    """The topic's min.insync.replicas set (kafka-python's admin: IncrementalAlterConfigs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs={"min.insync.replicas": str(min_isr)})])
        finally:
            admin.close()


def _finalize(cluster: LiveCluster, version: str, *, controllers: str) -> float:
    """spec.metadataVersion set to `version`; waits until the cluster settles with it finalized, as
    Kafka's own tool reports too. Returns the seconds that took."""
    started = time.monotonic()
    cluster.edit(lambda doc: doc["spec"].update({"metadataVersion": version}))
    cluster.wait(f"{version} finalized",
                 lambda: settled(s := cluster.status()) and s["metadataVersion"]["finalized"] == version, timeout_s=300)
    took = time.monotonic() - started
    assert _finalized(controllers) == version
    return took


def _restarted(cluster: LiveCluster) -> list[int]:
    return [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RestartNode")]


def test_kafka_nodes_roll_held_at_min_isr_then_metadata_version_then_a_fourth_controller_joins_and_leaves(
    tmp_path: Path,
) -> None:
    cluster = LiveCluster(tmp_path, _spec(), name=NAME)
    timings: dict[str, float] = {}
    status = cluster.status
    started = time.monotonic()
    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        timings["bring-up"] = time.monotonic() - started
        first = cluster.status()
        assert first is not None
        assert {n["id"]: n["version"] for n in first["nodes"]} == dict.fromkeys(range(6), "kafka 4.1.0"), first["nodes"]
        assert first["metadataVersion"]["finalized"] == "4.0-IV3", first["metadataVersion"]
        controller_bootstrap = cluster.controllers(list(CONTROLLERS))
        pids = {i: cluster.pid(i) for i in range(6)}
        with cluster.workload(bootstrap, TOPIC) as checker:
            cluster.more_acks("the producer's first acks")

            # 1. The roll, held at min ISR until the topic holding it is fixed.
            create_topic(bootstrap, PINNED, assignments={0: [3, 4, 5]}, min_isr=3)
            cluster.wait("pinned-0 in sync on 3-5", lambda: cluster.partition(PINNED)["isr"] == [3, 4, 5], timeout_s=120)
            # the active controller before the roll
            leader = cluster.wait("the quorum in status", lambda: (cluster.status() or {}).get("quorum"),
                                  timeout_s=60)["leaderId"]
            roll_started = time.monotonic()
            cluster.edit(lambda doc: doc["spec"]["config"].update({"log.retention.hours": "100"}))

            def blocked() -> dict | None:
                operation = (status() or {}).get("operation") or {}
                if operation.get("name") != "RollingRestart" or operation.get("step") != "blocked":
                    return None
                return next((b for b in operation.get("blockedBy", []) if b.get("topic") == PINNED), None)

            blocker = cluster.wait("the roll held by pinned-0", blocked, timeout_s=600)
            timings["controllers rolled, then held"] = time.monotonic() - roll_started
            assert blocker["kind"] == "partition" and blocker["partition"] == 0, blocker
            assert blocker["replicas"] == [3, 4, 5] and blocker["isr"] == [3, 4, 5] and blocker["minIsr"] == 3, blocker
            assert "would drop below min.insync.replicas=3 without broker" in blocker["message"], blocker
            # It waits and re-checks; the producer keeps being acknowledged (its topic is not held).
            cluster.more_acks("acks while the roll is held", count=10)
            hold_until = time.monotonic() + 10
            while time.monotonic() < hold_until:
                current = status()
                assert current is None or (current.get("operation") or {}).get("name") == "RollingRestart", current
                time.sleep(1)
            held = _restarted(cluster)
            assert sorted(held) == list(CONTROLLERS), held  # the controllers rolled; no broker did
            assert any(f"{PINNED}-0" in e and "min.insync.replicas=3" in e for e in cluster.events("RollBlocked"))
            alter_min_isr(bootstrap, PINNED, min_isr=2)  # the fix a user makes
            unblocked = time.monotonic()
            cluster.wait("a broker restarted after the fix",
                         lambda: set(_restarted(cluster)) - set(CONTROLLERS), timeout_s=300)
            timings["fix -> first broker restart"] = time.monotonic() - unblocked

            def rolled() -> bool:
                current = status()
                return settled(current) and all(cluster.pid(i) != pids[i] for i in range(6))

            cluster.wait("the roll to finish once pinned may lose a replica", rolled, timeout_s=900)
            timings["brokers rolled after the fix"] = time.monotonic() - unblocked
            timings["roll"] = time.monotonic() - roll_started
            cluster.more_acks("acks after the roll")
            rolled_pids = {i: cluster.pid(i) for i in range(6)}

            # 2. metadata.version after the roll, with no restart.
            timings["metadata.version bump"] = _finalize(cluster, "4.1-IV1", controllers=controller_bootstrap)
            assert {i: cluster.pid(i) for i in range(6)} == rolled_pids

            # 3. KIP-853: a fourth Kafka controller joins the voters, then leaves.
            def voters_are(wanted: int):
                def check() -> dict | None:
                    current = cluster.status()
                    voters = ((current or {}).get("quorum") or {}).get("voters", [])
                    if not settled(current) or len(voters) != wanted or current["controllers"] != f"{wanted}/{wanted}":
                        return None
                    return current
                return check

            scale_started = time.monotonic()
            cluster.edit(lambda doc: doc["spec"]["nodePools"][0].update({"replicas": 4}))
            grown = cluster.wait("four voters", voters_are(4), timeout_s=600)
            timings["controllers 3 -> 4"] = time.monotonic() - scale_started
            added = sorted({v["id"] for v in grown["quorum"]["voters"]} - set(CONTROLLERS))
            assert added == [6], grown["quorum"]
            format_log = (cluster.node_dir(6) / "format.log").read_text()
            assert "kafka.tools.StorageTool format" in format_log and "--no-initial-controllers" in format_log, format_log
            assert "--release-version 4.1-IV1" in format_log, format_log
            four = _kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller",
                               controller_bootstrap, "describe", "--status")
            cluster.more_acks("acks with four voters")
            shrink_started = time.monotonic()
            cluster.edit(lambda doc: doc["spec"]["nodePools"][0].update({"replicas": 3}))
            shrunk = cluster.wait("three voters again", voters_are(3), timeout_s=600)
            timings["controllers 4 -> 3"] = time.monotonic() - shrink_started
            three = _kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller",
                                controller_bootstrap, "describe", "--status")
            cluster.more_acks("acks after the voter changes")
            assert cluster.live_pid(6) is None

            # 4. Downgrades: one across 4.0-IV1 (a level that changed the metadata format) refused in
            # status with Kafka's reason, as Kafka's controller itself refuses it; a safe one sent.
            cluster.edit(lambda doc: doc["spec"].update({"metadataVersion": "3.9-IV0"}))

            def refused() -> dict | None:
                conditions = (cluster.status() or {}).get("conditions", [])
                return next((c for c in conditions if c["type"] == "Degraded" and c["status"] == "True"), None)

            degraded = cluster.wait("the unsafe downgrade refused", refused, timeout_s=300)
            assert degraded["reason"] == "MetadataVersionRefused", degraded
            assert f"metadata.version 4.1-IV1 -> 3.9-IV0 refused: {UNSAFE_DOWNGRADE}" in degraded["message"], degraded
            kafka_refusal = _features(controller_bootstrap, "downgrade", "--metadata", "3.9-IV0", ok=False)
            assert UNSAFE_DOWNGRADE in kafka_refusal, kafka_refusal
            refused_output = cluster.log.read_text()
            timings["safe downgrade"] = _finalize(cluster, "4.0-IV3", controllers=controller_bootstrap)
            cluster.more_acks("acks after the downgrade")
            after_voters = {i: cluster.pid(i) for i in range(6)}  # nothing restarted since the roll
        stored = read_partition(bootstrap, TOPIC)
    acked, lost, failed = cluster.outcome(stored)
    assert failed == [], failed[:5]
    assert acked > 100 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"

    # The roll: each node once, the controllers first, by SIGTERM within its grace period.
    restarts = _restarted(cluster)
    assert sorted(restarts) == list(range(6)), restarts
    assert set(restarts[:3]) == set(CONTROLLERS), restarts
    for node_id in restarts:
        node_log = (cluster.node_dir(node_id) / "server.log").read_text(errors="replace")
        assert "[kraftwerk local runtime] stopped by SIGTERM" in node_log, node_id
        assert "killed (SIGKILL)" not in node_log, node_id
    assert cluster.events("RollFinished")
    # The checker (`cluster.workload`) found no two nodes down at once and no partition under min
    # ISR because of the operator, from the first ack to the consumer's last delivered record.
    assert checker.disruptions >= 7, checker.summary()  # six restarts and node 6's stop
    # The voter changes: Kafka's own tool lists the voters, and nothing restarted for them.
    assert re.search(r'CurrentVoters:\s+\[.*"id": 6\b', four), four
    voters_line = next(line for line in three.splitlines() if line.startswith("CurrentVoters:"))
    assert all(f'"id": {i},' in voters_line for i in CONTROLLERS) and '"id": 6,' not in voters_line, voters_line
    assert [int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("AddVoter")] == [6]
    assert {int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("RemoveVoter")} == {6}
    assert after_voters == rolled_pids
    assert sorted(v["id"] for v in shrunk["quorum"]["voters"]) == list(CONTROLLERS)
    assert "volume(s) [0] kept (deleteClaim: false)" in (cluster.node_dir(6) / "server.log").read_text()
    # The downgrades: nothing sent for the refused one, the safe one sent as such and accepted.
    assert re.search(r"^Warning\s+MetadataVersionRefused\s+metadata.version 4.1-IV1 -> 3.9-IV0 refused",
                     refused_output, re.M), refused_output[-3000:]
    assert not re.search(r"FinalizeMetadataVersion.*3\.9-IV0", refused_output), refused_output[-3000:]
    assert re.search(r"^Normal\s+FinalizeMetadataVersion\s+UpdateFeatures metadata.version 4.1-IV1 -> 4.0-IV3 "
                     r"\(a safe downgrade\)", cluster.log.read_text(), re.M)
    print(f"acks {acked}, lost {len(lost)}; restarts {restarts} (active controller before: {leader}); "
          + ", ".join(f"{what} {seconds:.0f} s" for what, seconds in timings.items()) + f"; the checker: {checker.summary()}")
