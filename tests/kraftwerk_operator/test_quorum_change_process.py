"""KIP-853 scale-up on the local runtime: `kraftwerk up` with three engine controllers, the spec
edited to five; the two new controllers are formatted `--no-initial-controllers`, run as observers,
and join the voter set through AddRaftVoter, which the engine's own `kraft metadata-quorum` then
reports. The three running controllers are not restarted for it: the new
`controller.quorum.bootstrap.servers` still holds the old three, a majority of five
(`plan.roll.revision_change`)."""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from .builders import THREE_CONTROLLERS
from .local_state import written_status
from .test_roll_process import KRAFTWERK, REPO, _ready, _wait, kraftwerk_up

pytestmark = [pytest.mark.process, pytest.mark.timeout(1200)]



def _status(state: Path) -> dict | None:
    return written_status(state, "demo", namespace="ns")


def quorum_status(bootstrap: str) -> dict[str, str]:
    """The engine's own `kraft metadata-quorum describe --status`, by field (LeaderId, LeaderEpoch,
    CurrentVoters, ...)."""
    described = subprocess.run(
        [*KRAFTWERK[:2], "import sys; from kraft_engine.cli.main import main; sys.exit(main())",
         "metadata-quorum", "--bootstrap-controller", bootstrap, "describe", "--status"],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )
    assert described.returncode == 0, described.stdout + described.stderr
    return {key.strip(): value.strip() for key, sep, value in (line.partition(":") for line in described.stdout.splitlines())
            if sep}


def current_voters(bootstrap: str) -> str:
    """The CurrentVoters line of the engine's own `kraft metadata-quorum describe --status`."""
    return "CurrentVoters: " + quorum_status(bootstrap)["CurrentVoters"]


def test_controllers_three_to_five_join_the_voter_set(tmp_path: Path) -> None:
    spec = tmp_path / "growing.yaml"
    spec.write_text(textwrap.dedent(THREE_CONTROLLERS))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    with kraftwerk_up(spec, state, log) as up:
        _wait("Ready", lambda: _ready(_status(state)), timeout_s=600, up=up, log=log)
        pids = {i: (state / "ns" / "demo" / f"node-{i}" / "pid").read_text() for i in range(3)}
        grown = yaml.safe_load(spec.read_text())
        grown["spec"]["nodePools"][0]["replicas"] = 5
        spec.write_text(yaml.safe_dump(grown))

        def five_voters() -> dict | None:
            status = _status(state)
            if status is None or status.get("operation") is not None or not _ready(status):
                return None
            voters = sorted(v["id"] for v in (status.get("quorum") or {}).get("voters", []))
            return status if voters == [0, 1, 2, 3, 4] else None

        status = _wait("five voters", five_voters, timeout_s=600, up=up, log=log)
        bootstrap = ",".join(e.split("//", 1)[1] for v in status["quorum"]["voters"][:1] for e in v["endpoints"]
                             if e.startswith("CONTROLLER://"))
        voters_line = current_voters(bootstrap)
        still = {i: (state / "ns" / "demo" / f"node-{i}" / "pid").read_text() for i in range(3)}
    output = log.read_text()
    assert " RestartNode " not in output, output[-3000:]
    assert still == pids  # the same processes: no roll for the new bootstrap servers
    assert all(f'"id": {i}' in voters_line for i in range(5)), voters_line
    adds = [line for line in output.splitlines() if " AddVoter " in line]
    assert [int(line.split("node ", 1)[1].split(":", 1)[0]) for line in adds] == [3, 4], output[-3000:]
    for node_id in (3, 4):
        format_log = (state / "ns" / "demo" / f"node-{node_id}" / "format.log").read_text()
        assert "--no-initial-controllers" in format_log
