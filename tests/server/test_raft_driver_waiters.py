"""Appends waiting for their commit: resolved in offset order, each timed out at its own deadline,
all of them under one timer (no timer per append: the test store's HTTP route appends once per
request, thousands a second, on raft's event loop).

A real single-voter raft node on a real file log, on this test's event loop; its fsync is held
by the test, so nothing commits until the test lets it. No timing is asserted: only outcomes.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kraft_engine.protocol import ConnectionConfig
from kraft_engine.raft import RaftConfig, RaftNode, ReplicaKey, VoterNode, VoterSet
from kraft_engine.server.raft_driver import AppendResult, RaftDriver, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage import FileMetadataLog, FileQuorumStateStore

NODE_ID = 1


class _HeldFlush:
    """A log flush whose fsync waits until the test releases it."""

    def __init__(self, pending: Any, release: threading.Event) -> None:
        self.pending = pending
        self._release = release

    def sync(self) -> None:
        self._release.wait(60)
        self.pending.sync()


@pytest.fixture
async def leader(tmp_path: Path) -> AsyncIterator[tuple[RaftDriver, threading.Event]]:
    """A single voter that has committed its leader start; then every fsync is held until the
    returned event is set."""
    log, _ = FileMetadataLog.open(tmp_path)
    raft = RaftNode(
        config=RaftConfig(append_linger_ms=0), node_id=NODE_ID, directory_id=None, cluster_id="c", log=log,
        persisted=None, static_voters=VoterSet([VoterNode(key=ReplicaKey(NODE_ID, None), endpoints=())]),
        rng=random.Random(1), now_ms=wall_clock_ms(), local_endpoints=(),
    )
    driver = RaftDriver(raft=raft, log=log, quorum_state=FileQuorumStateStore(tmp_path / "quorum-state"), store=None,
                        metrics=RaftMetrics(CollectorRegistry(), node=lambda: raft),
                        connection_config=ConnectionConfig(client_id="test"))
    driver.start()
    release = threading.Event()
    try:
        async with asyncio.timeout(30):
            while driver.high_watermark is None:
                await asyncio.sleep(0.005)
        begin_flush, complete_flush = log.begin_flush, log.complete_flush
        log.begin_flush = lambda: _HeldFlush(begin_flush(), release)  # type: ignore[method-assign,assignment,return-value]
        log.complete_flush = lambda held: complete_flush(held.pending)  # type: ignore[method-assign,attr-defined]
        yield driver, release
    finally:
        release.set()
        await driver.close()


async def test_appends_waiting_for_their_commit_share_one_timer(
    leader: tuple[RaftDriver, threading.Event], monkeypatch: pytest.MonkeyPatch
) -> None:
    driver, release = leader
    loop = asyncio.get_running_loop()
    timers: list[Callable[..., Any]] = []
    call_at = loop.call_at

    def counting_call_at(when: float, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        timers.append(callback)
        return call_at(when, callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_at", counting_call_at)
    waits = [asyncio.ensure_future(driver.append_and_wait([b"%d" % n], timeout_ms=60_000)) for n in range(200)]
    for _ in range(5):
        await asyncio.sleep(0)
    assert not any(w.done() for w in waits)  # the fsync is held: nothing committed
    # One timer for the earliest deadline (plus the poll loop's own), not one per append.
    assert len(timers) < 10, f"{len(timers)} timers for 200 appends"
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*waits), timeout=30)
    offsets = [r.offset for r in results]
    assert offsets == sorted(offsets) and len(set(offsets)) == 200
    assert {r.epoch for r in results} == {driver.raft.epoch}


async def test_each_waiting_append_times_out_at_its_own_deadline_and_the_others_still_commit(
    leader: tuple[RaftDriver, threading.Event],
) -> None:
    driver, release = leader
    patient = driver.append_committed([b"patient"], timeout_ms=60_000)
    # Later, with earlier deadlines than the first: the one timer moves to the earliest.
    hasty = driver.append_committed([b"hasty"], timeout_ms=20)
    quick = driver.append_committed([b"quick"], timeout_ms=40)
    with pytest.raises(TimeoutError, match="was not committed within 20 ms"):
        await asyncio.wait_for(hasty, timeout=30)
    with pytest.raises(TimeoutError, match="was not committed within 40 ms"):
        await asyncio.wait_for(quick, timeout=30)
    assert not patient.done()
    release.set()
    result = await asyncio.wait_for(patient, timeout=30)
    assert result == AppendResult(offset=result.offset, epoch=driver.raft.epoch)
    # The timed-out appends were still written and commit after it: a timeout only stops the
    # waiting, it takes nothing back.
    async with asyncio.timeout(30):
        while (driver.high_watermark or 0) < result.offset + 3:
            await asyncio.sleep(0.005)
