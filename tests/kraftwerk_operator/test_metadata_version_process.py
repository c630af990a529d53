"""metadata.version on engine processes: `kraftwerk up` with three engine controllers and a broker
formatted at 4.1-IV1; the spec then asks for 4.2-IV1. The operator checks every node's supported
range (ApiVersions), sends UpdateFeatures for metadata.version alone, and the engine's own `kraft
features describe` reports the new finalized level. No node restarts for it.

Then downgrades on the same kind of cluster, formatted at 4.2-IV1: the spec asks for 3.9-IV0,
which crosses 4.0-IV1 (a level that changed the metadata format): the operator refuses it in
status (Degraded, reason MetadataVersionRefused, Kafka's "Refusing to perform the requested
downgrade because it might delete metadata information"), a Warning event, no UpdateFeatures, the
engine still at 4.2-IV1; then 4.1-IV1, a safe downgrade (no format change in between), which is
sent as SAFE_DOWNGRADE and which the engine's controller accepts."""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from .local_state import written_status
from .test_roll_process import KRAFTWERK, REPO, _wait, kraftwerk_up

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


def _finalized(bootstrap: str) -> str:
    """metadata.version's FinalizedVersionLevel in the engine's own `kraft features describe`."""
    described = subprocess.run(
        [*KRAFTWERK[:2], "import sys; from kraft_engine.cli.main import main; sys.exit(main())",
         "features", "--bootstrap-controller", bootstrap, "describe"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )
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
    with kraftwerk_up(spec, state, log) as up:
        bootstrap = _ready_at("4.1-IV1", state, up=up, log=log)
        pids = {i: (state / "default" / "bumping" / f"node-{i}" / "pid").read_text() for i in range(4)}
        bumped = yaml.safe_load(spec.read_text())
        bumped["spec"]["metadataVersion"] = "4.2-IV1"
        spec.write_text(yaml.safe_dump(bumped))
        _wait("4.2-IV1 finalized", lambda: _settled(s := _status(state)) and s["metadataVersion"]["finalized"] == "4.2-IV1",
              timeout_s=300, up=up, log=log)
        assert _finalized(bootstrap) == "4.2-IV1"
        still = {i: (state / "default" / "bumping" / f"node-{i}" / "pid").read_text() for i in range(4)}
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
