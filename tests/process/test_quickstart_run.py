"""The README's main job: `kraft quickstart` starts a three-controller quorum, shows it, and stops cleanly."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from quorum_processes import KRAFT, kraft

pytestmark = pytest.mark.process


def test_quickstart_runs_until_ctrl_c_then_reuses_its_storage(tmp_path: Path) -> None:
    state = tmp_path / "quickstart"
    process = subprocess.Popen([KRAFT, "quickstart", "--state-dir", str(state)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        seen: list[str] = []
        for line in process.stdout:
            seen.append(line)
            if line.startswith("== the quorum is running"):
                break
        output = "".join(seen)
        assert "LeaderId:" in output and "CurrentVoters:" in output
        assert "NodeId\tDirectoryId" in output.replace(" ", "")
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0
    for node_id in (1, 2, 3):
        assert f"Controller {node_id} stopped (exit code 0)" in rest
        assert f"Controller {node_id} stopped" in (state / f"controller-{node_id}" / "server.log").read_text()

    again = kraft("quickstart", "--state-dir", str(state), "--duration-s", "1", timeout_s=120)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("storage is already formatted") == 3
    assert "LeaderId:" in again.stdout
    assert again.stdout.count("stopped (exit code 0)") == 3
