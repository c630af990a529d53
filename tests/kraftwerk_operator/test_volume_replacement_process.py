"""A broker's JBOD volume fails and is replaced, on the local runtime with engine nodes, under a
live producer: `kraftwerk up` with three controllers and three brokers of two volumes each; a
kafka-python producer (acks=all, idempotence) writes a partition one of whose replicas lives on
broker 5's second volume; that volume fails while broker 5 runs: its directory is deleted (a
vanished disk), or (`full`) it is a real 4 MiB tmpfs that fills up, so appends there fail with
ENOSPC and the broker takes the directory offline while its files stay; the operator sees that
only through DescribeLogDirs (KAFKA_STORAGE_ERROR), with no human marking it.

The operator records the loss (`BrokerVolumeReplacement/await-approval`, the broker-disk-loss
runbook) and waits; once the spec carries the approval annotation it stops broker 5 (controlled
shutdown), puts a new directory in place, formats only it with a new directory id, starts the
broker, and closes the runbook once broker 5 is back in every ISR and URP is 0. Every record the
producer saw acknowledged is read back afterwards."""

from __future__ import annotations

import re
import shutil
import textwrap
import warnings
from pathlib import Path

import pytest
import yaml

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.java_properties import parse_properties
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_operator.model import APPROVE_ANNOTATION
from kraft_operator.plan.volume_replacement import VOLUME_REPLACEMENT_APPROVAL

from .local_state import written_status
from .test_roll_process import _wait, kraftwerk_up
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: jbod}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 3
      storage: {type: jbod, volumes: [{id: 0, size: 1Gi}, {id: 1, size: 1Gi}]}
  lifecycle: {terminationGracePeriodSeconds: 60}
  config:
    min.insync.replicas: "2"
    offsets.topic.replication.factor: "3"
"""

TOPIC = "jbod"
PARTITIONS = 6


def _status(state: Path) -> dict | None:
    return written_status(state, "jbod")


def _settled(status: dict | None) -> bool:
    """Ready, nothing under way, no runbook open, no partition short of replicas."""
    return (status is not None and status.get("operation") is None and not status.get("runbooks")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
            and (status.get("partitions") or {}).get("underReplicated", 1) == 0)


def _directory_id(directory: Path) -> str:
    meta = read_meta_properties(directory)
    assert meta.directory_id is not None
    return to_kafka_str(meta.directory_id)


def _create_topic(bootstrap: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            # Every partition on all three brokers, led by 3 or 4 (broker 5 never first).
            assignments = {p: [3 + p % 2, 4 - p % 2, 5] for p in range(PARTITIONS)}
            admin.create_topics([NewTopic(TOPIC, replica_assignments=assignments,
                                          topic_configs={"min.insync.replicas": "2"})])
        finally:
            admin.close()


@pytest.mark.parametrize("failure", ["deleted", "full"])
def test_a_failed_jbod_volume_is_replaced_with_approval_under_a_live_producer_losing_nothing(
    tmp_path: Path, failure: str, request: pytest.FixtureRequest,
) -> None:
    spec = tmp_path / "jbod.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    node5 = state / "default" / "jbod" / "node-5"
    failed = node5 / "data-1"
    disk = None
    if failure == "full":
        disk = request.getfixturevalue("small_tmpfs")(4 * 1024 * 1024)
        node5.mkdir(parents=True)
        failed.symlink_to(disk)  # the local runtime formats and uses it as broker 5's second volume
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready with three brokers", lambda: _settled(s := _status(state)) and s["brokers"] == "3/3",
              timeout_s=600, up=up, log=log)
        config = parse_properties((node5 / "server.properties").read_text())
        assert config["log.dirs"].split(",") == [str(node5 / "data-0"), str(failed)]
        bootstrap = ",".join(
            parse_properties((state / "default" / "jbod" / f"node-{i}" / "server.properties").read_text())
            ["advertised.listeners"].split("//", 1)[1] for i in (3, 4))
        _create_topic(bootstrap)
        on_failed = _wait("a partition of broker 5 on its second volume",
                          lambda: sorted(int(d.name.rsplit("-", 1)[1]) for d in failed.glob(f"{TOPIC}-*")),
                          timeout_s=120, up=up, log=log)
        partition = on_failed[0]
        lost_id = _directory_id(failed)
        with producing(bootstrap, TOPIC, acks, partition=partition):
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            if disk is None:
                shutil.rmtree(failed)  # the disk dies under the running broker
            else:
                request.getfixturevalue("fill_disk")(disk)  # ENOSPC: the broker takes data-1 offline

            def held() -> dict | None:
                status = _status(state)
                operation = (status or {}).get("operation") or {}
                if operation.get("name") != "BrokerVolumeReplacement" or operation.get("step") != "await-approval":
                    return None
                return status if any(r["name"] == "broker-disk-loss" for r in status.get("runbooks", [])) else None

            status = _wait("the loss recorded, waiting for approval", held, timeout_s=300, up=up, log=log)
            assert status["operation"]["volume"]["lostDirectoryId"] == lost_id
            if disk is not None:  # its files are all there: only the broker says it failed
                assert _directory_id(failed) == lost_id
                assert "offline (KAFKA_STORAGE_ERROR, reported by the broker)" in status["operation"]["waitingFor"]
            assert status["operation"]["blockedBy"][0]["kind"] == "approval"
            assert "ReplaceVolume" not in log.read_text()
            approved = yaml.safe_load(spec.read_text())
            approved["metadata"]["annotations"] = {APPROVE_ANNOTATION: VOLUME_REPLACEMENT_APPROVAL}
            spec.write_text(yaml.safe_dump(approved))

            def replaced() -> dict | None:
                status = _status(state)
                if not _settled(status) or status["brokers"] != "3/3":
                    return None
                node = next(n for n in status["nodes"] if n["id"] == 5)
                directory = next(d for d in node["directories"] if d["volumeId"] == 1)
                return status if directory["directoryId"] not in (None, lost_id) else None

            status = _wait("the volume replaced and re-replicated", replaced, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the replacement", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        stored = read_partition(bootstrap, TOPIC, partition=partition)
    output = log.read_text()
    new_id = _directory_id(failed)
    assert new_id != lost_id
    node = next(n for n in status["nodes"] if n["id"] == 5)
    assert {d["volumeId"]: d["directoryId"] for d in node["directories"]}[1] == new_id
    at = 0
    for step in ("ReplaceVolume", "FormatStorage", "StartNode", "VolumeReplaced", "RunbookClosed"):
        # In this order, each after the one before (node 5 was formatted and started once already).
        found = re.compile(rf"^\w+\s+{step}\s+.*(?:node 5|broker 5|broker-disk-loss)", re.M).search(output, at)
        assert found is not None, (step, output[at:][-4000:])
        at = found.end()
    format_log = (node5 / "format.log").read_text()
    assert format_log.count("--ignore-formatted") == 1, format_log  # only the replacement kept data-0
    node_log = (node5 / "server.log").read_text()
    assert "stopped by SIGTERM" in node_log and f"it had directory id {lost_id}" in node_log, node_log[-2000:]
    # The replica broker 5 lost came back: it is in the ISR again (URP 0 above) with the partition's records.
    assert any((node5 / f"data-{v}" / f"{TOPIC}-{partition}").is_dir() for v in (0, 1))
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
