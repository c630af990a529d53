"""The test store's snapshots are built and written off raft's loop: while one is being encoded,
the leader keeps appending and committing (the store keeps every entry it ever committed, so each
snapshot is larger than the last, and bench/quorum.py's 1 KiB runs write tens of megabytes).

A real single-voter raft node with the append-only store on a real file log, on this test's event
loop. The snapshot's encoding is held by the test until a later append has committed; no timing is
asserted, only the order of events.
"""

from __future__ import annotations

import asyncio
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kraft_engine.protocol import ConnectionConfig
from kraft_engine.raft import (
    RaftConfig,
    RaftNode,
    ReplicaKey,
    SnapshotBuilder,
    SnapshotLoad,
    VoterNode,
    VoterSet,
)
from kraft_engine.raft.log import read_snapshot_bytes
from kraft_engine.server.append_only_store import AppendOnlyStore
from kraft_engine.server.raft_driver import RaftDriver, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage import FileMetadataLog, FileQuorumStateStore

NODE_ID = 1


def _driver(directory: Path) -> tuple[RaftDriver, FileMetadataLog]:
    """A single voter with the test store, snapshotting every 1,000 bytes of entries."""
    log, _ = FileMetadataLog.open(directory)
    raft = RaftNode(
        config=RaftConfig(append_linger_ms=0), node_id=NODE_ID, directory_id=None, cluster_id="c", log=log,
        persisted=None, static_voters=VoterSet([VoterNode(key=ReplicaKey(NODE_ID, None), endpoints=())]),
        rng=random.Random(1), now_ms=wall_clock_ms(), local_endpoints=(),
    )
    driver = RaftDriver(raft=raft, log=log, quorum_state=FileQuorumStateStore(directory / "quorum-state"),
                        store=AppendOnlyStore(snapshot_interval_bytes=1000),
                        metrics=RaftMetrics(CollectorRegistry(), node=lambda: raft),
                        connection_config=ConnectionConfig(client_id="test"))
    return driver, log


async def _leading(driver: RaftDriver) -> None:
    driver.start()
    async with asyncio.timeout(30):
        while driver.high_watermark is None:
            await asyncio.sleep(0.005)


async def test_the_store_snapshot_is_encoded_off_the_loop_while_appends_keep_committing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, log = _driver(tmp_path)
    loop_thread = threading.get_ident()
    building = threading.Event()
    release = threading.Event()
    held: dict[str, Any] = {}
    build = SnapshotBuilder.build

    def held_build(self: SnapshotBuilder, **kwargs: Any) -> bytes:
        held["on_loop"] = threading.get_ident() == loop_thread
        building.set()
        # On raft's loop this wait would hold the loop, and the append below could not commit.
        held["released"] = release.wait(5)
        return build(self, **kwargs)

    monkeypatch.setattr(SnapshotBuilder, "build", held_build)
    try:
        await _leading(driver)
        async with asyncio.timeout(30):
            first = await driver.append_and_wait([b"a" * 600, b"b" * 600], timeout_ms=30_000)
            while not building.is_set():
                await asyncio.sleep(0.005)
            second = await driver.append_and_wait([b"c"], timeout_ms=30_000)
            release.set()
            while not log.snapshot_ids() or log.snapshot_ids()[-1].offset != first.offset + 1:
                await asyncio.sleep(0.005)
        assert held == {"on_loop": False, "released": True}
        assert second.offset > first.offset
        snapshot_id = log.snapshot_ids()[-1]
        restored = AppendOnlyStore(snapshot_interval_bytes=1000)
        restored.load_snapshot(SnapshotLoad(snapshot_id=snapshot_id, last_contained_log_timestamp_ms=-1,
                                            data=read_snapshot_bytes(log, snapshot_id)))
        assert restored.entries() == [(first.offset - 1, b"a" * 600), (first.offset, b"b" * 600)]
    finally:
        release.set()
        await driver.close()


async def test_a_node_closed_while_the_store_snapshot_is_written_finishes_it_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As when it was written on the loop, at the commit that made it due: a node stopped right
    # after an append still leaves the snapshot that append asked for.
    driver, log = _driver(tmp_path)
    building = threading.Event()
    release = threading.Event()
    build = SnapshotBuilder.build

    def held_build(self: SnapshotBuilder, **kwargs: Any) -> bytes:
        building.set()
        release.wait(30)
        return build(self, **kwargs)

    monkeypatch.setattr(SnapshotBuilder, "build", held_build)
    closing: asyncio.Task[None] | None = None
    try:
        await _leading(driver)
        committed = await driver.append_and_wait([b"a" * 1200], timeout_ms=30_000)
        async with asyncio.timeout(30):
            while not building.is_set():
                await asyncio.sleep(0.005)
        closing = asyncio.ensure_future(driver.close())
        await asyncio.sleep(0.05)
        assert not closing.done()  # waiting for the snapshot
        release.set()
        await asyncio.wait_for(closing, timeout=30)
        assert [s.offset for s in log.snapshot_ids()][-1] == committed.offset + 1
    finally:
        release.set()
        if closing is None:
            await driver.close()
