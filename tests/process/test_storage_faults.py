"""A controller whose metadata log disk fills up: it stops at once with one ERROR line naming the
file, the directory and the OS error (exit 1), never keeps answering; restarted on the still-full
disk it stops the same way; once space is freed it recovers its torn tail and rejoins with every
committed entry.

Node 3's metadata directory is a real 1 MiB tmpfs (skipped, with the reason, where this process
may not mount one). Runs on the raft-level stand-in state machine, whose entries can be compared
one by one across nodes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from quorum_processes import ProcessCluster, wait_for

pytestmark = pytest.mark.process

FillDisk = Callable[..., Path]
_VALUE = "x" * 900


def _values(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:04d}-{_VALUE}" for i in range(count)]


def _wait_exit(cluster: ProcessCluster, node_id: int) -> int:
    process = cluster.nodes[node_id].process
    assert process is not None
    wait_for(lambda: process.poll() is not None, timeout_s=120, what=f"controller {node_id} to exit")
    return int(process.returncode)


def _error_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if " ERROR " in line or line.startswith("Error: ")]


def test_a_full_metadata_disk_stops_the_node_and_it_rejoins_once_space_is_freed(
    cluster: ProcessCluster, small_tmpfs: Callable[[int], Path], fill_disk: FillDisk
) -> None:
    disk = small_tmpfs(1024 * 1024)
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    node3 = cluster.nodes[3]
    node3.data_dir = disk / "metadata"
    cluster.write_config(node3)
    cluster.format_initial([1, 2, 3])
    cluster.start_all([1, 2, 3])
    cluster.wait_for_leader([1, 2, 3])

    acknowledged: list[str] = []
    for batch in range(5):
        values = _values(f"before{batch}", 20)
        cluster.append(values, node_ids=[1, 2, 3])
        acknowledged += values
    wait_for(lambda: len(cluster.entries(3)) >= len(acknowledged), timeout_s=60, what="node 3 to catch up")

    # The disk fills up; the quorum keeps writing through whichever node leads (node 3 may; then
    # its own append meets the full disk). Nodes 1 and 2 are a majority without it.
    filler = fill_disk(disk)
    batch = 0
    while node3.process is not None and node3.process.poll() is None:
        values = _values(f"full{batch}", 20)
        cluster.append(values)
        acknowledged += values
        batch += 1
        assert batch < 200, "node 3 never noticed its full disk"
    assert _wait_exit(cluster, 3) == 1
    log = cluster.log(3)
    errors = _error_lines(log)
    assert len(errors) == 1, log
    metadata_dir = node3.data_dir / "__cluster_metadata-0"
    assert re.search(rf"Error while \w[\w ]* \S+ in dir {re.escape(str(metadata_dir))}: \[Errno 28\] No space left on device",
                     errors[0]), errors[0]
    assert "Traceback" not in log and "Task exception was never retrieved" not in log

    # Restarted on the still-full disk (with more to fetch than the torn tail freed): the same stop.
    for more in range(5):
        values = _values(f"more{more}", 20)
        cluster.append(values, node_ids=[1, 2])
        acknowledged += values
    before = len(log)
    cluster.launch(3)
    assert _wait_exit(cluster, 3) == 1
    again = cluster.log(3)[before:]
    errors = _error_lines(again)
    assert len(errors) == 1 and "No space left on device" in errors[0] and str(node3.data_dir) in errors[0], again
    assert "Traceback" not in again

    # Space freed: recovery cuts the torn tail, the node fetches the rest, nothing committed is lost.
    filler.unlink()
    cluster.start(3)
    def caught_up() -> bool:
        on_1, on_3 = [v for _, v in cluster.entries(1)], [v for _, v in cluster.entries(3)]
        # Every acknowledged append is there, in order (one retried after a timeout may be twice).
        remaining = iter(on_3)
        return on_3 == on_1 and all(value in remaining for value in acknowledged)

    wait_for(caught_up, timeout_s=120, what="node 3 to hold every acknowledged entry, as node 1 does")
    metrics = cluster.http_text(3, "/metrics")
    assert "kraftwerk_log_recovery_truncated_bytes" in metrics

