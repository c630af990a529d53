"""The event-loop stall monitor: its maximum and the line it logs for a stall a raft peer would feel."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from prometheus_client import CollectorRegistry

from kraft_engine.server.loop_stall import WARN_STALL_MS, LoopStallMonitor


async def _blocked_for(monitor: LoopStallMonitor, seconds: float) -> None:
    monitor.start()
    await asyncio.sleep(0.05)  # the sampler is waiting on its timer
    time.sleep(seconds)  # a synchronous call holding the loop, as a long callback would
    await asyncio.sleep(0.05)  # the sampler wakes, late
    await monitor.close()


def test_a_stall_past_half_the_fetch_timeout_is_measured_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    monitor = LoopStallMonitor(registry=registry, interval_ms=10)
    with caplog.at_level(logging.WARNING, logger="kraft_engine.server.loop_stall"):
        asyncio.run(_blocked_for(monitor, WARN_STALL_MS / 1000 + 0.2))
    assert monitor.max_stall_ms >= WARN_STALL_MS
    assert registry.get_sample_value("kraftwerk_event_loop_stall_ms_max") == monitor.max_stall_ms
    [line] = [r.getMessage() for r in caplog.records if "ran nothing else" in r.getMessage()]
    assert line == f"The event loop (raft's) ran nothing else for {monitor.max_stall_ms:.0f} ms"
