"""metadata.version on engine processes: `kraftwerk up` with three engine controllers and a broker
formatted at 4.1-IV1; the spec then asks for 4.2-IV1. The operator checks every node's supported
range (ApiVersions), sends UpdateFeatures for metadata.version alone, and the engine's own `kraft
features describe` reports the new finalized level. No node restarts for it, and a kafka-python
producer (acks=all, idempotence) writing all through the bump has every acknowledged record read back.

Then downgrades on the same kind of cluster, formatted at 4.2-IV1: the spec asks for 3.9-IV0,
which crosses 4.0-IV1 (a level that changed the metadata format): the operator refuses it in
status (Degraded, reason MetadataVersionRefused, Kafka's "Refusing to perform the requested
downgrade because it might delete metadata information"), a Warning event, no UpdateFeatures, the
engine still at 4.2-IV1; then 4.1-IV1, a safe downgrade (no format change in between), which is
sent as SAFE_DOWNGRADE and which the engine's controller accepts. In between, the engine's controller
itself is asked for the refused downgrade (`kraft features downgrade --metadata 3.9-IV0`, safe and
`--unsafe`): it refuses both with Kafka's reasons and the finalized level stays."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from kraft_engine.storage.java_properties import parse_properties

from .local_state import written_status
from .test_roll_process import KRAFTWERK, REPO, _wait, kraftwerk_up
from .workload import acked_count, lost_records, producing, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1200)]

CLUSTER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: bumping}
spec:
  metadataVersion: 4.1-IV1
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 1
      storage: {volumes: [{id: 0, size: 1Gi}]}
  config:
    offsets.topic.replication.factor: "1"
"""


def _status(state: Path) -> dict | None:
    return written_status(state, "bumping")


def _settled(status: dict | None) -> bool:
    return (status is not None and status.get("operation") is None
            and any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"]))


def _features(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The engine's own `kraft features --bootstrap-controller BOOTSTRAP ARGS` (Kafka's kafka-features)."""
    return subprocess.run(
        [*KRAFTWERK[:2], "import sys; from kraft_engine.cli.main import main; sys.exit(main())",
         "features", "--bootstrap-controller", bootstrap, *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )


def _finalized(bootstrap: str) -> str:
    """metadata.version's FinalizedVersionLevel in the engine's own `kraft features describe`."""
    described = _features(bootstrap, "describe")
    assert described.returncode == 0, described.stdout + described.stderr
    line = next(line for line in described.stdout.splitlines() if line.startswith("Feature: metadata.version"))
    return line.split("FinalizedVersionLevel: ", 1)[1].split("\t", 1)[0]


def _ready_at(version: str, state: Path, *, up: subprocess.Popen, log: Path) -> str:
    """Wait until Ready with its broker, check `version` is finalized; a controller's address."""
    status = _wait(f"Ready at {version}", lambda: _settled(s := _status(state)) and s["brokers"] == "1/1" and s,
                   timeout_s=600, up=up, log=log)
    endpoint = next(e for e in status["quorum"]["voters"][0]["endpoints"] if e.startswith("CONTROLLER://"))
    bootstrap = endpoint.split("//", 1)[1]
    assert _finalized(bootstrap) == version
    return bootstrap


def test_a_metadata_version_bump_on_engine_nodes_is_finalized_without_a_restart(tmp_path: Path) -> None:
    spec = tmp_path / "bumping.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    acks = tmp_path / "acks.jsonl"
    with kraftwerk_up(spec, state, log) as up:
        bootstrap = _ready_at("4.1-IV1", state, up=up, log=log)
        pids = {i: (state / "default" / "bumping" / f"node-{i}" / "pid").read_text() for i in range(4)}
        brokers = parse_properties((state / "default" / "bumping" / "node-3" / "server.properties").read_text())[
            "advertised.listeners"].split("//", 1)[1]
        with producing(brokers, "demo", acks, partition=0):  # a live producer all through the bump
            _wait("the producer's first acks", lambda: acked_count(acks) >= 20, timeout_s=120, up=up, log=log)
            bumped = yaml.safe_load(spec.read_text())
            bumped["spec"]["metadataVersion"] = "4.2-IV1"
            spec.write_text(yaml.safe_dump(bumped))
            _wait("4.2-IV1 finalized",
                  lambda: _settled(s := _status(state)) and s["metadataVersion"]["finalized"] == "4.2-IV1",
                  timeout_s=300, up=up, log=log)
            before = acked_count(acks)
            _wait("acks after the bump", lambda: acked_count(acks) >= before + 20, timeout_s=120, up=up, log=log)
        assert _finalized(bootstrap) == "4.2-IV1"
        still = {i: (state / "default" / "bumping" / f"node-{i}" / "pid").read_text() for i in range(4)}
        stored = read_partition(brokers, "demo", partition=0)
    acked, lost = lost_records(acks, stored)
    assert acked > 40 and lost == [], f"{len(lost)} acknowledged record(s) not read back, first {lost[:5]}"
    output = log.read_text()
    assert "FinalizeMetadataVersion" in output, output[-3000:]
    assert " RestartNode " not in output and still == pids  # a bump needs no restart


def test_an_unsafe_downgrade_is_refused_in_status_and_a_safe_one_is_finalized(tmp_path: Path) -> None:
    spec = tmp_path / "bumping.yaml"
    spec.write_text(textwrap.dedent(CLUSTER).replace("metadataVersion: 4.1-IV1", "metadataVersion: 4.2-IV1"))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with kraftwerk_up(spec, state, log) as up:
        bootstrap = _ready_at("4.2-IV1", state, up=up, log=log)
        lowered = yaml.safe_load(spec.read_text())
        lowered["spec"]["metadataVersion"] = "3.9-IV0"
        spec.write_text(yaml.safe_dump(lowered))

        def refused() -> dict | None:
            status = _status(state)
            degraded = next((c for c in (status or {}).get("conditions", []) if c["type"] == "Degraded"), None)
            return degraded if degraded is not None and degraded["status"] == "True" else None

        degraded = _wait("the downgrade refused", refused, timeout_s=300, up=up, log=log)
        assert degraded["reason"] == "MetadataVersionRefused", degraded
        assert ("metadata.version 4.2-IV1 -> 3.9-IV0 refused: Refusing to perform the requested downgrade because "
                "it might delete metadata information") in degraded["message"], degraded
        assert _finalized(bootstrap) == "4.2-IV1"
        refused_output = log.read_text()
        # The engine's controller refuses the same change on its own, with Kafka's reason: the
        # UpdateFeatures the operator would have sent (SAFE_DOWNGRADE), and an UNSAFE_DOWNGRADE.
        for flags, reason in (((), "Refusing to perform the requested downgrade because it might delete metadata "
                                   "information."),
                              (("--unsafe",), "Unsafe metadata downgrade is not supported in this version.")):
            answer = _features(bootstrap, "downgrade", "--metadata", "3.9-IV0", *flags)
            assert answer.returncode != 0 and reason in answer.stdout + answer.stderr, answer
            assert "INVALID_UPDATE_VERSION" in answer.stdout + answer.stderr or "Invalid" in answer.stdout + answer.stderr
        assert _finalized(bootstrap) == "4.2-IV1"
        safe = yaml.safe_load(spec.read_text())
        safe["spec"]["metadataVersion"] = "4.1-IV1"
        spec.write_text(yaml.safe_dump(safe))
        _wait("4.1-IV1 finalized", lambda: _settled(s := _status(state)) and s["metadataVersion"]["finalized"] == "4.1-IV1",
              timeout_s=300, up=up, log=log)
        assert _finalized(bootstrap) == "4.1-IV1"
    output = log.read_text()
    assert re.search(r"^Warning\s+MetadataVersionRefused\s+metadata.version 4.2-IV1 -> 3.9-IV0 refused", refused_output,
                     re.M), refused_output[-3000:]
    assert "FinalizeMetadataVersion" not in refused_output, refused_output[-3000:]  # nothing was sent
    assert re.search(r"^Normal\s+FinalizeMetadataVersion\s+UpdateFeatures metadata.version 4.2-IV1 -> 4.1-IV1 "
                     r"\(a safe downgrade\)", output, re.M), output[-3000:]
