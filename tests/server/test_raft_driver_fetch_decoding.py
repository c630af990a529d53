"""Who decodes a fetched batch's records, and where: a node whose raft listeners only queue
committed batches for their own thread (the quorum controller) hands a Fetch response to its core
undecoded, so a follower's append, fsync and next Fetch never wait for a decode; a node with a
listener that reads the records on raft's loop (a broker's metadata listener, the test store)
decodes them on a worker thread first, so the loop finds them decoded.

A real single-voter raft node and driver on a real file log; the Fetch response is handed to the
driver's send path as if a leader had answered (its core has no such request in flight and drops
it after the driver is done with it)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from prometheus_client import CollectorRegistry

from kraft_engine.protocol import ConnectionConfig
from kraft_engine.raft import (
    Endpoint,
    ListenerEvent,
    OutboundRequest,
    RaftConfig,
    RaftNode,
    ReplicaKey,
    VoterNode,
    VoterSet,
)
from kraft_engine.raft import messages as m
from kraft_engine.records.log_batch import build_data_batch
from kraft_engine.server import raft_driver
from kraft_engine.server.append_only_store import AppendOnlyStore
from kraft_engine.server.raft_driver import RaftDriver, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage import FileMetadataLog, FileQuorumStateStore

_LARGE = build_data_batch([b"v" * 40] * 5_000, base_offset=0, epoch=1, timestamp_ms=0)  # ~300 KB


def _driver(directory: Path, *, store: AppendOnlyStore | None = None) -> RaftDriver:
    log, _ = FileMetadataLog.open(directory)
    raft = RaftNode(
        config=RaftConfig(), node_id=1, directory_id=None, cluster_id="c", log=log, persisted=None,
        static_voters=VoterSet([VoterNode(key=ReplicaKey(1, None), endpoints=())]),
        rng=random.Random(1), now_ms=wall_clock_ms(), local_endpoints=(),
    )
    return RaftDriver(raft=raft, log=log, quorum_state=FileQuorumStateStore(directory / "quorum-state"), store=store,
                      metrics=RaftMetrics(CollectorRegistry(), node=lambda: raft),
                      connection_config=ConnectionConfig(client_id="test"))


class _Connected:
    connected = True


async def _fetched_decodes(driver: RaftDriver, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many batches the driver decoded ahead of its core for one large Fetch response."""
    decodes: list[int] = []
    real = raft_driver.remember_batches

    def counting(data: Any) -> int:
        decodes.append(real(data))
        return decodes[-1]

    monkeypatch.setattr(raft_driver, "remember_batches", counting)
    response = m.fetch_response(
        error=ErrorCode.none, leader_id=2, epoch=1, high_watermark=0, log_start_offset=0, records=_LARGE,
        diverging=None, snapshot_id=None, endpoints=(), listener="CONTROLLER",
    )

    async def answered(connection: Any, message: Any) -> Any:
        return response

    monkeypatch.setattr(driver, "_connection", lambda host, port: _Connected())
    monkeypatch.setattr(driver, "_exchange", answered)
    request = m.fetch_request(cluster_id="c", replica=ReplicaKey(1, None), epoch=1, fetch_offset=0,
                              last_fetched_epoch=0, high_watermark=None, max_wait_ms=500, max_bytes=1 << 20)
    await driver._send(OutboundRequest(token=12345, destination_id=2,
                                       endpoints=(Endpoint("CONTROLLER", "localhost", 1),), request=request,
                                       timeout_ms=2000))
    return decodes


def _queues(event: ListenerEvent) -> None:
    """A listener that only queues events for another thread (reads no records here)."""


async def test_a_controllers_driver_hands_fetched_batches_to_its_core_undecoded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver = _driver(tmp_path)
    driver.add_listener(_queues, reads_records_on_loop=False)
    try:
        assert await _fetched_decodes(driver, monkeypatch) == []
    finally:
        await driver.close()


@pytest.mark.parametrize("reader", ["listener", "store"])
async def test_a_driver_whose_listener_reads_records_on_its_loop_decodes_fetched_batches_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    store = AppendOnlyStore(snapshot_interval_bytes=1 << 30) if reader == "store" else None
    driver = _driver(tmp_path, store=store)
    driver.add_listener(_queues, reads_records_on_loop=False)
    if reader == "listener":
        driver.add_listener(_queues)  # by default a listener may read records on the loop
    try:
        assert await _fetched_decodes(driver, monkeypatch) == [1]
    finally:
        await driver.close()
