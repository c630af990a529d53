"""A raft listener far behind is caught up in slices, with raft's event loop going round between
them: a restarted node replaying its log keeps answering Fetch, Vote and BeginQuorumEpoch.

A real single-voter raft node on a real file log, on this test's event loop; no timing: what is
checked is which loop round each slice of the log reached the listener in.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from pathlib import Path

from prometheus_client import CollectorRegistry

from kraft_engine.protocol import ConnectionConfig
from kraft_engine.raft import (
    CommittedBatch,
    ElectionState,
    ListenerEvent,
    RaftConfig,
    RaftNode,
    ReplicaKey,
    VoterNode,
    VoterSet,
)
from kraft_engine.server.raft_driver import RaftDriver, wall_clock_ms
from kraft_engine.server.raft_metrics import RaftMetrics
from kraft_engine.storage import FileMetadataLog, FileQuorumStateStore

NODE_ID = 1
_RECORD = b"x" * 1000
_BATCHES = 60  # of 100 records, ~100 KiB each: ~6 MiB of log, six listener slices or more


def _driver(directory: Path) -> RaftDriver:
    """A single voter over the file log in `directory`, reopened as it was left."""
    log, _ = FileMetadataLog.open(directory)
    quorum_state = FileQuorumStateStore(directory / "quorum-state")
    saved = quorum_state.read()
    persisted = None if saved is None else ElectionState(
        epoch=saved.leader_epoch, leader_id=saved.leader_id,
        voted_key=None if saved.voted_id is None else ReplicaKey.of(saved.voted_id, None),
    )
    raft = RaftNode(
        config=RaftConfig(append_linger_ms=0), node_id=NODE_ID, directory_id=None, cluster_id="c", log=log,
        persisted=persisted, static_voters=VoterSet([VoterNode(key=ReplicaKey(NODE_ID, None), endpoints=())]),
        rng=random.Random(1), now_ms=wall_clock_ms(), local_endpoints=(),
    )
    return RaftDriver(raft=raft, log=log, quorum_state=quorum_state, store=None,
                      metrics=RaftMetrics(CollectorRegistry(), node=lambda: raft),
                      connection_config=ConnectionConfig(client_id="test"))


async def _write_log(directory: Path) -> int:
    driver = _driver(directory)
    driver.start()
    try:
        async with asyncio.timeout(60):
            while driver.raft.high_watermark is None:
                await asyncio.sleep(0.005)
            for _ in range(_BATCHES):
                await driver.append_and_wait([_RECORD] * 100, timeout_ms=60_000)
        return driver.log_end_offset
    finally:
        await driver.close()


async def test_a_listener_far_behind_is_caught_up_one_slice_per_loop_round(tmp_path: Path) -> None:
    end = await _write_log(tmp_path)
    driver = _driver(tmp_path)
    rounds = 0
    delivered_in_round: dict[int, int] = {}  # loop round -> records delivered in it
    delivered = 0

    def listener(event: ListenerEvent) -> None:
        nonlocal delivered
        if isinstance(event, CommittedBatch):
            delivered_in_round[rounds] = delivered_in_round.get(rounds, 0) + len(event.records)
            delivered += len(event.records)

    async def count_rounds() -> None:
        nonlocal rounds
        while True:
            rounds += 1
            await asyncio.sleep(0)

    driver.add_listener(listener)
    counter = asyncio.ensure_future(count_rounds())
    driver.start()
    try:
        async with asyncio.timeout(60):
            while delivered < _BATCHES * 100:
                await asyncio.sleep(0.005)
        assert end >= _BATCHES * 100
        # The core hands the listener at most 1 MiB of log per call: ~10 of these batches. Here two
        # calls may fall in one round (the poll, and the leader's first flush completing); a
        # driver that polled again without letting the loop go round delivered the whole log in
        # one or two rounds.
        assert len(delivered_in_round) >= _BATCHES // 20
        assert max(delivered_in_round.values()) <= 2 * 11 * 100
    finally:
        counter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await counter
        await driver.close()
