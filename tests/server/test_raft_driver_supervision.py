"""The raft driver is supervised: an exception out of the core or out of performing its Output
(here a raft listener raising, and a failed write) stops the node with one ERROR line, refuses
inbound requests from then on and sets `fatal`; it never keeps serving.

A real single-voter raft node on a real file log, on this test's event loop.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from kraft_engine.protocol import ConnectionConfig, ConnectionLost
from kraft_engine.raft import Endpoint, LeaderChange, ListenerEvent, RaftNode, ReplicaKey, VoterNode, VoterSet
from kraft_engine.server.config import parse_config
from kraft_engine.server.raft_driver import RaftDriver, RaftFatalError, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage import FileMetadataLog, FileQuorumStateStore

PORT = 19093  # advertised only: nothing connects to a single voter


def _driver(directory: Path) -> tuple[RaftDriver, CollectorRegistry]:
    config = parse_config({
        "process.roles": "controller", "node.id": "1", "controller.listener.names": "CONTROLLER",
        "listeners": f"CONTROLLER://127.0.0.1:{PORT}", "controller.quorum.voters": f"1@127.0.0.1:{PORT}",
        "log.dirs": str(directory), "controller.quorum.election.timeout.ms": "50",
    })
    log, _ = FileMetadataLog.open(directory / "__cluster_metadata-0")
    endpoint = Endpoint("CONTROLLER", "127.0.0.1", PORT)
    raft = RaftNode(
        config=config.raft_config(), node_id=1, directory_id=None, cluster_id="c", log=log, persisted=None,
        static_voters=VoterSet([VoterNode(key=ReplicaKey(1, None), endpoints=(endpoint,))]),
        rng=random.Random(1), now_ms=wall_clock_ms(), local_endpoints=(endpoint,),
    )
    registry = CollectorRegistry()
    metrics = RaftMetrics(registry, node=lambda: raft)
    driver = RaftDriver(
        raft=raft, log=log, quorum_state=FileQuorumStateStore(log.directory / "quorum-state"), store=None,
        metrics=metrics, connection_config=ConnectionConfig(client_id="test"),
    )
    return driver, registry


async def test_a_raft_listener_that_raises_stops_the_node_with_one_error_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    driver, registry = _driver(tmp_path)

    def broken_listener(event: ListenerEvent) -> None:
        if isinstance(event, LeaderChange):
            raise RuntimeError("a listener bug")

    driver.add_listener(broken_listener)
    with caplog.at_level(logging.ERROR, logger="kraft_engine.server.raft_driver"):
        driver.start()
        await asyncio.wait_for(driver.fatal.wait(), timeout=30)
    try:
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "RuntimeError('a listener bug')" in errors[0].getMessage()
        assert errors[0].exc_info is not None  # a bug: the traceback is logged with it
        assert isinstance(driver.fatal_error, RaftFatalError)
        with pytest.raises(ConnectionLost):
            await driver.handle_request(object())
        with pytest.raises(RaftFatalError):
            await driver.wait_until_fatal_or(asyncio.Event())
        assert registry.get_sample_value("kraftwerk_raft_fatal_errors_total", {"kind": "unexpected"}) == 1
    finally:
        await driver.close()


async def test_a_failed_write_stops_the_node_and_names_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    driver, registry = _driver(tmp_path)
    # quorum-state cannot be written: its temporary file's name is taken by a directory.
    (tmp_path / "__cluster_metadata-0" / "quorum-state.tmp").mkdir()
    with caplog.at_level(logging.ERROR, logger="kraft_engine.server.raft_driver"):
        driver.start()
        await asyncio.wait_for(driver.fatal.wait(), timeout=30)
    try:
        [error] = [r for r in caplog.records if r.levelno >= logging.ERROR]
        message = error.getMessage()
        assert message.startswith("Error while creating quorum-state.tmp in dir ")
        assert "Is a directory" in message and message.endswith("; stopping node 1")
        assert error.exc_info is None  # one line: file, directory and OS error say it all
        assert registry.get_sample_value("kraftwerk_raft_fatal_errors_total", {"kind": "storage"}) == 1
    finally:
        await driver.close()
