"""Fixtures for process-level tests: a `ProcessCluster` whose processes are always SIGKILLed at the end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from broker_processes import BrokerCluster, start_cluster
from played_brokers import CONTROLLER_MODE
from quorum_processes import HOST, ProcessCluster

from kraft_engine.admin.controller_admin import ControllerAdmin


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


@pytest.fixture
async def controllers(cluster: ProcessCluster) -> AsyncIterator[ProcessCluster]:
    """Controllers 1, 2, 3 running the quorum controller with short broker sessions (played_brokers)."""
    cluster.extra_config.update(CONTROLLER_MODE)
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    await asyncio.to_thread(cluster.format_initial, [1, 2, 3])
    for node_id in (1, 2, 3):
        await asyncio.to_thread(cluster.start, node_id)
    yield cluster


@pytest.fixture
async def admin(controllers: ProcessCluster) -> AsyncIterator[ControllerAdmin]:
    async with ControllerAdmin([(HOST, n.port) for n in controllers.nodes.values()], timeout_ms=30000) as client:
        yield client


@pytest.fixture(scope="module")
def module_brokers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerCluster]:
    """Three controllers and brokers 101-103 shared by one module's tests (each test uses topics of
    its own): a cluster start is most of a test's time on a loaded machine."""
    processes = BrokerCluster(root=Path(tmp_path_factory.mktemp("brokers")))
    try:
        start_cluster(processes)
        yield processes
    finally:
        processes.cleanup()
