"""metadata.version on engine processes: `kraftwerk up` with three engine controllers and a broker
formatted at 4.1-IV1; the spec then asks for 4.2-IV1. The operator checks every node's supported
range (ApiVersions), sends UpdateFeatures for metadata.version alone, and the engine's own `kraft
features describe` reports the new finalized level. No node restarts for it."""

from __future__ import annotations

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


def test_a_metadata_version_bump_on_engine_nodes_is_finalized_without_a_restart(tmp_path: Path) -> None:
    spec = tmp_path / "bumping.yaml"
    spec.write_text(textwrap.dedent(CLUSTER))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with kraftwerk_up(spec, state, log) as up:
        status = _wait("Ready at 4.1-IV1", lambda: _settled(s := _status(state)) and s["brokers"] == "1/1" and s,
                       timeout_s=600, up=up, log=log)
        endpoint = next(e for e in status["quorum"]["voters"][0]["endpoints"] if e.startswith("CONTROLLER://"))
        bootstrap = endpoint.split("//", 1)[1]
        assert _finalized(bootstrap) == "4.1-IV1"
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
