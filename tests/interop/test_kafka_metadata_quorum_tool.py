"""Apache Kafka's own kafka-metadata-quorum against our running three-controller quorum.

An operator's runbook uses Kafka's tool: its Java admin client negotiates ApiVersions, finds the
leader with DescribeCluster and reads DescribeQuorum v2 from our nodes, and it must print what
`kraft metadata-quorum` prints. The quorum is the README's main job (`kraft quickstart`). Values
that move between two calls (epoch, offsets, timestamps, lag time) are left out of the comparison;
everything else, layout included, must be the same. Needs the cached Kafka jars and a JDK.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .kafka_jars import kafka_tool, needs_jars

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

KRAFT = str(Path(sys.executable).parent / "kraft")
_BOOTSTRAP = re.compile(r"--bootstrap-controller (\S+) describe --status")
_STARTED = re.compile(r"(\d+) \(pid (\d+)\)")
# Fields whose values move between two calls; the rest of each line is compared.
_MOVING = ("LeaderEpoch:", "HighWatermark:", "MaxFollowerLag:", "MaxFollowerLagTimeMs:")


def _kafka_tool(bootstrap: str, *args: str) -> str:
    result = kafka_tool("org.apache.kafka.tools.MetadataQuorumCommand", "--bootstrap-controller", bootstrap, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _our_tool(bootstrap: str, *args: str) -> str:
    result = subprocess.run([KRAFT, "metadata-quorum", "--bootstrap-controller", bootstrap, *args],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _status_shape(text: str) -> list[str]:
    return [line.split(":", 1)[0] if line.startswith(_MOVING) else line for line in text.splitlines()]


def _replication_shape(text: str) -> list[tuple[str, ...]]:
    # Kafka's prettyPrintTable: every cell padded to its column, then a tab. Widths follow the
    # values, so compare the tab structure and the stable columns (NodeId, DirectoryId, Status).
    rows = text.splitlines()
    assert all(row.endswith("\t") and row.count("\t") == 7 for row in rows), rows
    return [(cells[0].strip(), cells[1].strip(), cells[6].strip()) for cells in (row.split("\t") for row in rows)]


def _stop(process: subprocess.Popen[str], printed: str) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        # The controllers run in sessions of their own: never leave them behind.
        for _, pid in _STARTED.findall(printed):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


@needs_jars
def test_kafkas_metadata_quorum_tool_reads_our_quorum_and_prints_what_ours_prints(tmp_path: Path) -> None:
    quickstart = subprocess.Popen([KRAFT, "quickstart", "--state-dir", str(tmp_path / "quickstart")],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    printed = ""
    try:
        assert quickstart.stdout is not None
        for line in quickstart.stdout:
            printed += line
            if line.startswith("== the quorum is running"):
                break
        match = _BOOTSTRAP.search(printed)
        assert match, printed
        bootstrap = match.group(1)

        kafka_status = _kafka_tool(bootstrap, "describe", "--status")
        ours_status = _our_tool(bootstrap, "describe", "--status")
        assert "CurrentVoters:          [{\"id\": 1, \"directoryId\": " in kafka_status
        assert _status_shape(kafka_status) == _status_shape(ours_status)

        kafka_replication = _kafka_tool(bootstrap, "describe", "--replication")
        ours_replication = _our_tool(bootstrap, "describe", "--replication")
        assert _replication_shape(kafka_replication)[0] == ("NodeId", "DirectoryId", "Status")
        assert sorted(status for *_, status in _replication_shape(kafka_replication)[1:]) == [
            "Follower", "Follower", "Leader"]
        assert _replication_shape(kafka_replication) == _replication_shape(ours_replication)
    finally:
        _stop(quickstart, printed)
