"""A JBOD volume added to and then removed from a running broker pool, on the local runtime with
engine nodes, under a live producer: `kraftwerk up` with three controllers and three brokers of two
volumes each; a kafka-python producer (acks=all, idempotence) writes a partition one of whose
replicas lives on broker 5's volume 1.

Adding volume 2 rewrites each broker's `log.dirs` and rolls the brokers one at a time behind the
gates; each broker formats its new, empty `data-2` at its start (meta.properties with a new
directory id, nothing run by the operator) and registers it, so new partitions land there.
Removing volume 1 then moves every replica off each broker's `data-1` with AlterReplicaLogDirs
(`LogDirRemoval`), waits until the brokers report it empty, and only then rolls them without it.
Every record the producer saw acknowledged is read back afterwards."""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path

import pytest
import yaml

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.java_properties import parse_properties
from kraft_engine.storage.meta_properties import read_meta_properties

from .local_state import written_status
from .test_roll_process import _wait, kraftwerk_up
from .test_volume_replacement_process import CLUSTER  # three controllers, three brokers of two volumes
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1800)]


TOPIC = "jbod"
PARTITIONS = 6
BROKERS = (3, 4, 5)


def _status(state: Path) -> dict | None:
    return written_status(state, "jbod")


def _settled(status: dict | None) -> bool:
    return (status is not None and status.get("operation") is None and not status.get("runbooks")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
            and (status.get("partitions") or {}).get("underReplicated", 1) == 0 and status["brokers"] == "3/3")


def _directory_id(directory: Path) -> str | None:
    try:
        meta = read_meta_properties(directory)
    except FileNotFoundError:
        return None
    return to_kafka_str(meta.directory_id) if meta.directory_id is not None else None


def _create_topic(bootstrap: str, name: str, *, assignments: dict[int, list[int]] | None = None) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient, NewTopic

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            topic = (NewTopic(name, replica_assignments=assignments, topic_configs={"min.insync.replicas": "2"})
                     if assignments is not None else NewTopic(name, num_partitions=PARTITIONS, replication_factor=3))
            admin.create_topics([topic])
        finally:
            admin.close()


def _with_volumes(spec: Path, volumes: list[int]) -> None:
    edited = yaml.safe_load(spec.read_text())
    edited["spec"]["nodePools"][1]["storage"]["volumes"] = [{"id": v, "size": "1Gi"} for v in volumes]
    spec.write_text(yaml.safe_dump(edited))


def _partition_dirs(directory: Path) -> list[str]:
    """The partition directories a broker still serves from `directory`.

    A replica moved away or deleted is renamed `<topic>-<p>.<uuid>-delete` and removed
    `file.delete.delay.ms` later (Kafka's scheduled deletion); it holds no served data, so it is
    not counted.
    """
    return sorted(d.name for d in directory.glob("*-*")
                  if d.is_dir() and not d.name.startswith("__cluster") and not d.name.endswith("-delete"))


def test_a_volume_added_then_one_removed_under_a_live_producer_losing_nothing(tmp_path: Path) -> None:
    spec = tmp_path / "jbod.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    nodes = {b: state / "default" / "jbod" / f"node-{b}" for b in BROKERS}
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready with three brokers", lambda: _settled(_status(state)), timeout_s=600, up=up, log=log)
        bootstrap = ",".join(parse_properties((nodes[b] / "server.properties").read_text())
                             ["advertised.listeners"].split("//", 1)[1] for b in (3, 4))
        _create_topic(bootstrap, TOPIC, assignments={p: [3 + p % 2, 4 - p % 2, 5] for p in range(PARTITIONS)})
        on_data_1 = _wait("a partition of broker 5 on its volume 1",
                          lambda: sorted(int(d.rsplit("-", 1)[1]) for d in _partition_dirs(nodes[5] / "data-1")
                                         if d.startswith(f"{TOPIC}-")),
                          timeout_s=120, up=up, log=log)
        partition = on_data_1[0]
        with producing(bootstrap, TOPIC, acks, partition=partition):
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)

            # -- add volume 2 ---------------------------------------------------------------------
            _with_volumes(spec, [0, 1, 2])

            def added() -> dict | None:
                status = _status(state)
                if not _settled(status):
                    return None
                ids = {b: _directory_id(nodes[b] / "data-2") for b in BROKERS}
                for node in status["nodes"]:
                    if node["id"] in BROKERS:
                        recorded = {d["volumeId"]: d["directoryId"] for d in node["directories"]}
                        if ids[node["id"]] is None or recorded.get(2) != ids[node["id"]]:
                            return None
                return status

            _wait("volume 2 formatted by each broker and recorded in status", added, timeout_s=900, up=up, log=log)
            for b in BROKERS:
                config = parse_properties((nodes[b] / "server.properties").read_text())
                assert config["log.dirs"].split(",") == [str(nodes[b] / f"data-{v}") for v in (0, 1, 2)]
                assert (nodes[b] / "format.log").read_text().count("$ ") == 1  # formatted once, at creation
                assert "Formatted the new log directory" in (nodes[b] / "server.log").read_text()
            # registered: the controller places new partitions in the new directories
            _create_topic(bootstrap, "after-add")
            _wait("new partitions in the new directories",
                  lambda: any(d.startswith("after-add-") for b in BROKERS for d in _partition_dirs(nodes[b] / "data-2")),
                  timeout_s=120, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the addition", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)

            # -- remove volume 1 ------------------------------------------------------------------
            held = {b: _partition_dirs(nodes[b] / "data-1") for b in BROKERS}
            assert held[5], held
            _with_volumes(spec, [0, 2])
            seen_steps: set[str] = set()

            def removed() -> dict | None:
                status = _status(state)
                operation = (status or {}).get("operation") or {}
                if operation.get("name") == "LogDirRemoval":
                    seen_steps.add(operation.get("step", ""))
                if not _settled(status):
                    return None
                for b in BROKERS:
                    config = parse_properties((nodes[b] / "server.properties").read_text())
                    if config["log.dirs"].split(",") != [str(nodes[b] / "data-0"), str(nodes[b] / "data-2")]:
                        return None
                return status

            _wait("volume 1 emptied and the brokers rolled without it", removed, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the removal", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        stored = read_partition(bootstrap, TOPIC, partition=partition)
    output = log.read_text()
    assert "moving" in seen_steps, seen_steps  # shown in status while the replicas moved
    for b in BROKERS:
        assert _partition_dirs(nodes[b] / "data-1") == [], (b, _partition_dirs(nodes[b] / "data-1"))
        for name in held[b]:  # every replica it held is now in one of the staying directories
            assert any((nodes[b] / f"data-{v}" / name).is_dir() for v in (0, 2)), (b, name)
    at = 0
    for step in ("LogDirRemovalPlanned", "AlterReplicaLogDirs", "LogDirDrained", "RestartNode"):
        found = re.compile(rf"^\w+\s+{step}\s", re.M).search(output, at)
        assert found is not None, (step, output[at:][-4000:])
        at = found.end()
    # no broker restarted while one of its directories being removed still held a replica: every
    # RestartNode after the removal began comes after the last LogDirDrained
    removal = output.index("LogDirRemovalPlanned")
    last_drained = output.rindex("LogDirDrained")
    assert not re.search(r"^\w+\s+RestartNode\s", output[removal:last_drained], re.M), output[removal:last_drained]
    acked, lost = lost_records(acks, stored)
    assert acked > 60 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"


def test_a_broker_halted_by_its_full_metadata_volume_is_named_in_status_and_replaced_with_approval(
    tmp_path: Path, request: pytest.FixtureRequest,
) -> None:
    """Broker 5's volume 0 (its metadata log directory, and a log directory) is a real 16 MiB
    tmpfs that fills up under a live producer: the broker halts (Kafka's broker does: it must not
    serve metadata it cannot persist), answers nothing, and restarts only to halt again. Its exit
    is the evidence: status names the volume, the broker-disk-loss runbook opens, the replacement
    waits for approval; approved, a new volume is formatted and every acknowledged record is read
    back."""
    from kraft_operator.model import APPROVE_ANNOTATION
    from kraft_operator.plan.volume_replacement import VOLUME_REPLACEMENT_APPROVAL

    spec = tmp_path / "jbod.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    node5 = state / "default" / "jbod" / "node-5"
    disk = request.getfixturevalue("small_tmpfs")(16 * 1024 * 1024)
    node5.mkdir(parents=True)
    metadata = node5 / "data-0"
    metadata.symlink_to(disk)
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready with three brokers", lambda: _settled(_status(state)), timeout_s=600, up=up, log=log)
        bootstrap = ",".join(parse_properties((state / "default" / "jbod" / f"node-{b}" / "server.properties")
                                              .read_text())["advertised.listeners"].split("//", 1)[1] for b in (3, 4))
        _create_topic(bootstrap, TOPIC, assignments={p: [3 + p % 2, 4 - p % 2, 5] for p in range(PARTITIONS)})
        lost_id = _directory_id(metadata)
        with producing(bootstrap, TOPIC, acks, partition=0):
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            request.getfixturevalue("fill_disk")(disk)

            def held() -> dict | None:
                status = _status(state)
                operation = (status or {}).get("operation") or {}
                if operation.get("name") != "BrokerVolumeReplacement" or operation.get("step") != "await-approval":
                    return None
                runbook = next((r for r in status.get("runbooks", []) if r["name"] == "broker-disk-loss"), None)
                return status if runbook is not None else None

            status = _wait("the halted broker's volume named, waiting for approval", held, timeout_s=300, up=up,
                           log=log)
            assert status["operation"]["volume"]["volumeId"] == 0
            assert status["operation"]["volume"]["lostDirectoryId"] == lost_id
            assert status["operation"]["blockedBy"][0]["kind"] == "approval"
            assert _directory_id(metadata) == lost_id  # its files are all there: only its exit says it failed
            output = log.read_text()
            assert "halted on it, its metadata log directory" in output, output[-3000:]
            assert "ReplaceVolume" not in output
            node_log = (node5 / "server.log").read_text()
            assert "Shutdown broker because the metadata log dir" in node_log or "stopping node 5" in node_log
            approved = yaml.safe_load(spec.read_text())
            approved["metadata"]["annotations"] = {APPROVE_ANNOTATION: VOLUME_REPLACEMENT_APPROVAL}
            spec.write_text(yaml.safe_dump(approved))

            def replaced() -> dict | None:
                status = _status(state)
                if not _settled(status):
                    return None
                node = next(n for n in status["nodes"] if n["id"] == 5)
                directory = next(d for d in node["directories"] if d["volumeId"] == 0)
                return status if directory["directoryId"] not in (None, lost_id) else None

            _wait("the metadata volume replaced and re-replicated", replaced, timeout_s=900, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the replacement", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        stored = read_partition(bootstrap, TOPIC, partition=0)
    assert _directory_id(metadata) not in (None, lost_id)
    assert not metadata.is_symlink()  # the failed tmpfs was put aside, a new directory is in its place
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
