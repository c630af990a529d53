"""Every startup refusal is one `Error: ...` line naming the file and what to do, exit 1, no traceback.

Each case damages one thing in a real node's directory and runs the real `kraft server start`.
Foreign and mismatched meta.properties are in test_node_robustness.py, through the same check.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import pytest
from quorum_processes import ProcessCluster, start_refused

pytestmark = pytest.mark.process

BOOTSTRAP = "00000000000000000000-0000000000.checkpoint"


def _refusal(cluster: ProcessCluster, node_id: int = 1) -> str:
    return start_refused(cluster.nodes[node_id].config_path)


def _standalone(cluster: ProcessCluster, *, run: bool = False) -> Path:
    """Node 1, formatted --standalone (and run once, with a few entries, when `run`); its partition dir."""
    node = cluster.add_node(1)
    cluster.format(1, "--standalone")
    if run:
        cluster.start(1)
        cluster.wait_for_leader([1])
        cluster.append([f"v{i}" for i in range(5)], node_ids=[1])
        assert cluster.stop(1) == 0
    return node.data_dir / "__cluster_metadata-0"


def _steps_named(line: str, cluster: ProcessCluster) -> None:
    config = str(cluster.nodes[1].config_path)
    assert f"kraft storage format --config {config} --cluster-id {cluster.cluster_id} --no-initial-controllers" in line
    assert "remove-controller --controller-id 1 --controller-directory-id" in line
    assert "add-controller" in line


def test_a_torn_bootstrap_checkpoint_is_one_line_naming_the_file(cluster: ProcessCluster) -> None:
    partition = _standalone(cluster)
    snapshot = partition / BOOTSTRAP
    data = snapshot.read_bytes()
    snapshot.write_bytes(data[: len(data) // 2])
    line = _refusal(cluster)
    assert f"The snapshot {snapshot} is damaged" in line
    _steps_named(line, cluster)


def test_a_corrupt_bootstrap_checkpoint_is_one_line_naming_the_file(cluster: ProcessCluster) -> None:
    partition = _standalone(cluster)
    snapshot = partition / BOOTSTRAP
    data = bytearray(snapshot.read_bytes())
    data[-40] ^= 0xFF  # inside the footer batch: its CRC no longer matches
    snapshot.write_bytes(bytes(data))
    line = _refusal(cluster)
    assert f"The snapshot {snapshot} is damaged" in line and "crc" in line.lower()


def test_a_damaged_snapshot_the_log_still_covers_names_the_file_to_delete(cluster: ProcessCluster) -> None:
    cluster.extra_config["metadata.log.max.record.bytes.between.snapshots"] = "1"
    partition = _standalone(cluster, run=True)
    snapshots = sorted(p for p in partition.glob("*.checkpoint") if p.name != BOOTSTRAP)
    assert snapshots, "the node wrote no snapshot"
    latest = snapshots[-1]
    latest.write_bytes(latest.read_bytes()[:-10])
    line = _refusal(cluster)
    assert f"The snapshot {latest} is damaged" in line and f"delete {latest.name}" in line
    # The advice works: without the file the node starts and still holds every entry.
    for each in snapshots:
        each.unlink()
    cluster.start(1)
    assert [v for _, v in cluster.entries(1)] == [f"v{i}" for i in range(5)]


def test_a_bad_quorum_state_is_one_line_naming_the_file(cluster: ProcessCluster) -> None:
    partition = _standalone(cluster, run=True)
    (partition / "quorum-state").write_text("{not json")
    line = _refusal(cluster)
    assert f"the file {partition / 'quorum-state'}" in line and "restore it from a backup" in line
    _steps_named(line, cluster)


def test_a_missing_bootstrap_checkpoint_is_one_line_naming_the_file(cluster: ProcessCluster) -> None:
    partition = _standalone(cluster, run=True)
    (partition / BOOTSTRAP).unlink()
    line = _refusal(cluster)
    assert f"The bootstrap checkpoint {partition / BOOTSTRAP} is missing" in line
    _steps_named(line, cluster)


def test_a_lost_metadata_log_is_one_line_with_the_replacement_steps(cluster: ProcessCluster) -> None:
    partition = _standalone(cluster, run=True)
    shutil.rmtree(partition)
    line = _refusal(cluster)
    assert f"The metadata log of node 1 is missing: {partition} does not exist" in line
    _steps_named(line, cluster)
    assert not partition.exists()  # refusing created nothing


def test_a_taken_port_is_one_line(cluster: ProcessCluster) -> None:
    node = cluster.add_node(1)
    cluster.format(1, "--standalone")
    with socket.create_server(("127.0.0.1", node.port)):
        line = _refusal(cluster)
    assert "cannot listen on 127.0.0.1" in line and "Address already in use" in line
