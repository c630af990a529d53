"""The seeded event scheduler at the heart of every simulation run.

A run must be reproducible from its seed alone, so there is exactly one source of randomness
(`random.Random(seed)`) and one clock (virtual milliseconds that only move when an event runs).
Events are ordered by (deadline, insertion sequence), never by anything that could differ
between two runs of the same seed. After every event the registered checks run; a failing
check is reported together with the seed and the index of the event that broke it, which is
all a developer needs to replay the run to that exact point.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from kraft_engine.sim.invariants import SimulationFailure, Violation

__all__ = ["EventHandle", "Scheduler", "Stalled"]


class Stalled(SimulationFailure):
    """A `run_until` condition did not become true within its bound of events or virtual time."""


@dataclass(order=True)
class _Event:
    deadline_ms: int
    sequence: int
    label: str = field(compare=False)
    action: Callable[[], object] = field(compare=False)
    handle: EventHandle = field(compare=False)


@dataclass
class EventHandle:
    """Returned by `Scheduler.call_at`; `cancel()` keeps the event from running."""

    label: str
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class Scheduler:
    """Virtual clock, event queue and the run's single `random.Random`."""

    def __init__(self, *, seed: int, start_ms: int = 0) -> None:
        self.seed = seed
        self.random = random.Random(seed)
        self.now_ms = start_ms
        # Number of events executed so far; a failure names the index of the event that caused it.
        self.event_index = 0
        self._queue: list[_Event] = []
        self._sequence = 0
        self._checks: list[Callable[[], None]] = []

    def add_check(self, check: Callable[[], None]) -> None:
        """Run `check` after every event; it raises `Violation` when an invariant breaks."""
        self._checks.append(check)

    def call_at(self, deadline_ms: int, action: Callable[[], object], *, label: str) -> EventHandle:
        handle = EventHandle(label)
        self._sequence += 1
        heapq.heappush(
            self._queue,
            _Event(max(deadline_ms, self.now_ms), self._sequence, label, action, handle),
        )
        return handle

    def call_later(self, delay_ms: int, action: Callable[[], object], *, label: str) -> EventHandle:
        return self.call_at(self.now_ms + delay_ms, action, label=label)

    def every(
        self,
        period_ms: int,
        action: Callable[[], object],
        *,
        label: str,
        jitter_ms: int = 0,
        delay_ms: int = 0,
    ) -> EventHandle:
        """Run `action` every `period_ms` (+ a random jitter below `jitter_ms`) until cancelled."""
        handle = EventHandle(label)

        def fire() -> None:
            action()
            if not handle.cancelled:
                extra_ms = self.random.randrange(jitter_ms) if jitter_ms > 0 else 0
                self._push(self.now_ms + period_ms + extra_ms, fire, handle)

        self._push(self.now_ms + delay_ms, fire, handle)
        return handle

    def _push(self, deadline_ms: int, action: Callable[[], object], handle: EventHandle) -> None:
        self._sequence += 1
        heapq.heappush(self._queue, _Event(deadline_ms, self._sequence, handle.label, action, handle))

    @property
    def pending(self) -> int:
        return sum(1 for event in self._queue if not event.handle.cancelled)

    def step(self) -> bool:
        """Run the next event and the checks; False when nothing is left to run."""
        while self._queue:
            event = heapq.heappop(self._queue)
            if event.handle.cancelled:
                continue
            self.now_ms = max(self.now_ms, event.deadline_ms)
            self.event_index += 1
            try:
                event.action()
            except Violation as v:
                raise self.failure(v.invariant, f"{v.detail} (in event '{event.label}')") from v
            except SimulationFailure:
                raise
            except Exception as e:
                # A crash inside the core or the driver (an InvariantViolation from `require`, a
                # codec error) is a failure of the run like any broken invariant: report the seed.
                raise self.failure("NoCrash", f"{type(e).__name__}: {e} (in event '{event.label}')") from e
            self.verify()
            return True
        return False

    def verify(self) -> None:
        """Run every check now; a `Violation` becomes a `SimulationFailure` naming seed and event."""
        for check in self._checks:
            try:
                check()
            except Violation as v:
                raise self.failure(v.invariant, v.detail) from v

    def failure(self, invariant: str, detail: str) -> SimulationFailure:
        """A failure of this run at this point, for checks a scenario makes itself."""
        return SimulationFailure(
            seed=self.seed, event_index=self.event_index, now_ms=self.now_ms, invariant=invariant, detail=detail
        )

    def run_until(
        self,
        condition: Callable[[], bool],
        *,
        what: str,
        within_ms: int | None = None,
        max_events: int = 1_000_000,
    ) -> None:
        """Run events until `condition()` holds.

        `within_ms` is a liveness bound in virtual time measured from now: if the condition is
        still false once the clock passes it, the run fails with `Stalled` (a liveness violation,
        reported like any safety violation).
        """
        deadline_ms = None if within_ms is None else self.now_ms + within_ms
        executed = 0
        while not condition():
            if deadline_ms is not None and self.now_ms > deadline_ms:
                raise self._stalled(what, f"not reached within {within_ms} ms of virtual time")
            if executed >= max_events:
                raise self._stalled(what, f"not reached within {max_events} events")
            if not self.step():
                raise self._stalled(what, "event queue exhausted")
            executed += 1

    def run_for(self, duration_ms: int) -> None:
        """Run every event due in the next `duration_ms` of virtual time."""
        end_ms = self.now_ms + duration_ms
        while self._queue and self.next_deadline_ms() <= end_ms:
            self.step()
        self.now_ms = max(self.now_ms, end_ms)

    def next_deadline_ms(self) -> int:
        """When the next live event is due (now when nothing is queued)."""
        while self._queue and self._queue[0].handle.cancelled:
            heapq.heappop(self._queue)
        return self._queue[0].deadline_ms if self._queue else self.now_ms

    def _stalled(self, what: str, why: str) -> Stalled:
        return Stalled(
            seed=self.seed,
            event_index=self.event_index,
            now_ms=self.now_ms,
            invariant="Liveness",
            detail=f"{what}: {why}",
        )
