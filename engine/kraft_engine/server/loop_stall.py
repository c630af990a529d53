"""How long the node's event loop — raft's loop — went without running anything else.

Raft's liveness rests on the loop that serves Fetch, Vote and BeginQuorumEpoch answering within the
fetch timeout (2 s by default). Anything that holds that loop (a long synchronous call, or another
thread holding the GIL) delays every one of those requests by as much. This monitor wakes every
`interval_ms` and measures how late it woke: that lateness is the longest a raft request could have
waited to be read in that moment. It is exported as `kraftwerk_event_loop_stall_ms` (a histogram)
and `kraftwerk_event_loop_stall_ms_max` (the longest since start), and `bench/controller.py`
reports the maximum over its heaviest controller work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from prometheus_client import CollectorRegistry, Gauge, Histogram

__all__ = ["LoopStallMonitor"]

logger = logging.getLogger(__name__)

#: A stall this long (half raft's default fetch timeout) is logged with its time, so that a bench
#: or an operator can tell which work it fell in (a fence, a snapshot, a restart).
WARN_STALL_MS = 1000

_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2000, 5000, 10000)


class LoopStallMonitor:
    """Samples the running loop's wake-up lateness; `max_stall_ms` is the longest seen."""

    def __init__(self, *, registry: CollectorRegistry | None = None, interval_ms: int = 10) -> None:
        self._interval_s = interval_ms / 1000
        self.max_stall_ms = 0.0
        self._task: asyncio.Task[None] | None = None
        self._histogram: Histogram | None = None
        if registry is not None:
            self._histogram = Histogram(
                "kraftwerk_event_loop_stall_ms", "How late the event loop woke from a timer (ms)",
                registry=registry, buckets=_BUCKETS_MS,
            )
            Gauge(
                "kraftwerk_event_loop_stall_ms_max", "The longest event-loop stall since start (ms)", registry=registry,
            ).set_function(lambda: self.max_stall_ms)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._sample(), name="event-loop-stall-monitor")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _sample(self) -> None:
        while True:
            before = time.monotonic()
            await asyncio.sleep(self._interval_s)
            stall_ms = max(0.0, (time.monotonic() - before - self._interval_s) * 1000)
            self.max_stall_ms = max(self.max_stall_ms, stall_ms)
            if stall_ms >= WARN_STALL_MS:
                logger.warning("The event loop (raft's) ran nothing else for %.0f ms", stall_ms)
            if self._histogram is not None:
                self._histogram.observe(stall_ms)
