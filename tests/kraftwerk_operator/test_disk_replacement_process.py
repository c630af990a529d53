"""Controller disk replacement on the local runtime with engine nodes: `kraftwerk up` with three
engine controllers; a follower's metadata volume is deleted and its process SIGKILLed (a disk
lost with its node). The operator opens the controller-disk-loss runbook and waits for the
approval annotation (`status.operation` ControllerDiskReplacement/await-approval); approved, it
formats the new volume `--no-initial-controllers` (a new directory id), starts the node as an
observer, and once it has caught up swaps the voter: RemoveRaftVoter of the old directory id, then
AddRaftVoter of the new one (`docs/controller-disk-replacement.md`). The engine's own `kraft
metadata-quorum describe --status` then lists the node with its new directory id; the other two
controllers kept running throughout (same pids), and at every status written the voter set kept
a running majority."""

from __future__ import annotations

import os
import shutil
import signal
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from kraft_operator.model import APPROVE_ANNOTATION

from .builders import THREE_CONTROLLERS
from .live_cluster import assert_in_order
from .test_quorum_change_process import _status, current_voters
from .test_roll_process import _ready, _wait, kraftwerk_up

pytestmark = [pytest.mark.process, pytest.mark.timeout(1200)]

APPROVAL = "controller-disk-loss/format-observer"


def test_a_lost_controller_disk_is_reformatted_with_approval_and_its_voter_swapped(tmp_path: Path) -> None:
    spec = tmp_path / "demo.yaml"
    spec.write_text(textwrap.dedent(THREE_CONTROLLERS))
    state = tmp_path / "state"
    log = tmp_path / "up.log"
    nodes = state / "ns" / "demo"
    with kraftwerk_up(spec, state, log) as up:
        status = _wait("Ready", lambda: _ready(s := _status(state)) and s.get("operation") is None and s,
                       timeout_s=600, up=up, log=log)
        leader = status["quorum"]["leaderId"]
        lost = next(i for i in (1, 2, 0) if i != leader)
        old_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        others = [i for i in range(3) if i != lost]
        pids = {i: (nodes / f"node-{i}" / "pid").read_text() for i in others}
        shutil.rmtree(nodes / f"node-{lost}" / "data-0")  # the disk is gone ...
        os.kill(int((nodes / f"node-{lost}" / "pid").read_text()), signal.SIGKILL)  # ... with its node

        def held() -> dict | None:
            status = _status(state)
            operation = (status or {}).get("operation") or {}
            if operation.get("name") != "ControllerDiskReplacement" or operation.get("step") != "await-approval":
                return None
            return status if any(r["name"] == "controller-disk-loss" for r in status.get("runbooks", [])) else None

        status = _wait("the disk loss recorded, waiting for approval", held, timeout_s=300, up=up, log=log)
        assert f'{APPROVE_ANNOTATION}="{APPROVAL}"' in status["operation"]["blockedBy"][0]["message"]
        time.sleep(5)
        assert not (nodes / f"node-{lost}" / "data-0" / "meta.properties").exists()  # nothing formatted unapproved
        approved = yaml.safe_load(spec.read_text())
        approved["metadata"]["annotations"] = {APPROVE_ANNOTATION: APPROVAL}
        spec.write_text(yaml.safe_dump(approved))

        voter_sets: list[list[str]] = []

        def swapped() -> dict | None:
            status = _status(state)
            if status is None:
                return None
            voters = (status.get("quorum") or {}).get("voters", [])
            voter_sets.append([f"{v['id']}:{v['directoryId']}" for v in voters])
            if status.get("operation") is not None or status.get("runbooks") or not _ready(status):
                return None
            now = {v["id"]: v["directoryId"] for v in voters}
            return status if sorted(now) == [0, 1, 2] and now[lost] != old_id else None

        status = _wait("the voter swapped to the new disk", swapped, timeout_s=900, up=up, log=log)
        new_id = next(v["directoryId"] for v in status["quorum"]["voters"] if v["id"] == lost)
        bootstrap = ",".join(e.split("//", 1)[1] for v in status["quorum"]["voters"] if v["id"] != lost
                             for e in v["endpoints"] if e.startswith("CONTROLLER://"))
        voters_line = current_voters(bootstrap)
        still = {i: (nodes / f"node-{i}" / "pid").read_text() for i in others}
    output = log.read_text()
    assert still == pids  # the two live controllers were never restarted
    assert new_id in voters_line and old_id not in voters_line, voters_line
    # Never fewer than a majority of the set's voters: two of three, or both of the two during the swap.
    assert all(len(v) >= 2 for v in voter_sets if v), voter_sets
    assert_in_order(output, [
        ("FormatStorage", f"node {lost}: format .* as a controller that joins the quorum later"),
        ("StartNode", f"node {lost}"),
        ("RemoveVoter", f"node {lost}: RemoveRaftVoter for its lost disk \\(directory id {old_id}\\)"),
        ("AddVoter", f"node {lost}: AddRaftVoter \\(directory id {new_id}\\)")])
    format_log = (nodes / f"node-{lost}" / "format.log").read_text()
    # First formatted as an initial controller, then the new disk as one that joins.
    assert 0 <= format_log.find("--initial-controllers") < format_log.find("--no-initial-controllers"), format_log
