"""Fixtures for the real-client suites: three controllers and three brokers as real processes,
configured for consumer groups (a short initial rebalance delay, a small `__consumer_offsets`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

# The process harness (tests/process) is shared: its modules are plain files on the path there.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "process"))

from broker_processes import BrokerCluster, start_cluster

GROUP_CONFIG = {
    "group.initial.rebalance.delay.ms": "500",
    "offsets.topic.num.partitions": "5",
    "offsets.topic.replication.factor": "3",
    "min.insync.replicas": "2",
}


@pytest.fixture(scope="module")
def group_brokers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    """Brokers 101-103 behind three controllers, shared by one module's tests (each test has its
    own topic and group); a module's `BROKER_CONFIG` adds to (or overrides) `GROUP_CONFIG`."""
    processes = BrokerCluster(root=Path(tmp_path_factory.mktemp("group-brokers")))
    processes.broker_config.update(GROUP_CONFIG)
    processes.broker_config.update(getattr(request.module, "BROKER_CONFIG", {}))
    try:
        start_cluster(processes)
        yield processes
    finally:
        processes.cleanup()
