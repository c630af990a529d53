"""The README's main job: `kraft quickstart` starts a three-controller quorum, shows it, and stops cleanly."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import urllib.request
from pathlib import Path

import pytest
from quorum_processes import KRAFT

pytestmark = pytest.mark.process

_STARTED = re.compile(r"(\d+) \(pid (\d+)\)")
_METRICS = re.compile(r"controller (\d+) (http://[\d.]+:\d+)/metrics")


def _stop_quickstart(process: subprocess.Popen[str], output: str) -> None:
    """Stop a quickstart that is still running, and never leave its controllers behind.

    Its graceful path (SIGTERM) stops the controllers. They run in sessions of their own, so if
    quickstart must be killed instead they would outlive it: they are killed by the pids it printed.
    """
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        tail, _ = process.communicate()  # what it printed and nobody read yet
        lines = (output + (tail or "")).splitlines()
        started = next((line for line in lines if line.startswith("== started controllers")), "")
        for _, pid in _STARTED.findall(started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


def _quickstart(state: Path, *args: str, stderr_path: Path) -> subprocess.Popen[str]:
    with stderr_path.open("w", encoding="utf-8") as stderr:
        return subprocess.Popen([KRAFT, "quickstart", "--state-dir", str(state), *args], stdout=subprocess.PIPE,
                                stderr=stderr, text=True)


def test_quickstart_runs_until_ctrl_c_then_reuses_its_storage(tmp_path: Path) -> None:
    state = tmp_path / "quickstart"
    stderr_path = tmp_path / "quickstart.stderr"
    process = _quickstart(state, stderr_path=stderr_path)
    seen: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(line)
            if line.startswith("== the quorum is running"):
                break
        output = "".join(seen)
        assert "LeaderId:" in output and "CurrentVoters:" in output, output + stderr_path.read_text()
        assert "NodeId\tDirectoryId" in output.replace(" ", "")
        endpoints = dict(_METRICS.findall(output))
        assert sorted(endpoints) == ["1", "2", "3"], output
        for base in endpoints.values():
            with urllib.request.urlopen(f"{base}/healthz", timeout=30) as health:
                assert health.status == 200
            with urllib.request.urlopen(f"{base}/metrics", timeout=30) as metrics:
                assert "kafka_raft_current_leader" in metrics.read().decode()
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=120)
    finally:
        _stop_quickstart(process, "".join(seen))
    assert process.returncode == 0, stderr_path.read_text()
    for node_id in (1, 2, 3):
        assert f"Controller {node_id} stopped (exit code 0)" in rest
        assert f"Controller {node_id} stopped" in (state / f"controller-{node_id}" / "server.log").read_text()

    again = _quickstart(state, "--duration-s", "1", stderr_path=stderr_path)
    out = ""
    try:
        out, _ = again.communicate(timeout=180)
    finally:
        _stop_quickstart(again, out)
    assert again.returncode == 0, stderr_path.read_text()
    assert out.count("storage is already formatted") == 3
    assert "LeaderId:" in out
    assert out.count("stopped (exit code 0)") == 3
