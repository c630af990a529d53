"""Fixtures for process-level tests: a `ProcessCluster` whose processes are always SIGKILLed at the end."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from quorum_processes import ProcessCluster


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    processes = ProcessCluster(root=tmp_path)
    try:
        yield processes
    finally:
        processes.cleanup()


@pytest.fixture
def three_voters(cluster: ProcessCluster) -> ProcessCluster:
    """Controllers 1, 2, 3 formatted with --initial-controllers and running."""
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    cluster.format_initial([1, 2, 3])
    cluster.start_all([1, 2, 3])
    return cluster
