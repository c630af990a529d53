"""Background work of the active controller, driven by the shell's clock.

Kafka schedules each periodic task as a deferred event on the controller queue. The pure
controller has no queue and no clock: it keeps each task's next deadline, tells the shell the
earliest one, and runs whatever is due when the shell ticks it with the current time. Tasks run
only on the active controller; renouncing cancels them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kraft_engine.controller.results import ControllerResult

__all__ = ["PeriodicTask", "PeriodicTaskControl"]


@dataclass(frozen=True, slots=True)
class PeriodicTask:
    """`run(now_ms)` returns the records to write and whether to run again at once (it hit a
    per-run cap) instead of after `period_ms`. `due_ms(now_ms)`, when given, is the earliest
    time the task can have work again (None: not before its period); the task then runs at that
    time if it falls inside the period, rather than at the period's end."""

    name: str
    period_ms: int
    run: Callable[[int], tuple[ControllerResult[None], bool]]
    due_ms: Callable[[int], int | None] | None = None


class PeriodicTaskControl:
    def __init__(self) -> None:
        self._tasks: dict[str, PeriodicTask] = {}
        self._deadlines_ms: dict[str, int] = {}

    def register(self, task: PeriodicTask) -> None:
        self._tasks[task.name] = task

    def active(self) -> bool:
        return bool(self._deadlines_ms)

    def activate(self, now_ms: int) -> None:
        self._deadlines_ms = {name: now_ms + task.period_ms for name, task in self._tasks.items()}

    def deactivate(self) -> None:
        self._deadlines_ms = {}

    def next_deadline_ms(self) -> int | None:
        return min(self._deadlines_ms.values(), default=None)

    def due(self, now_ms: int) -> list[PeriodicTask]:
        """The tasks whose deadline has passed, earliest first."""
        names = sorted((d, n) for n, d in self._deadlines_ms.items() if d <= now_ms)
        return [self._tasks[n] for _, n in names]

    def reschedule(self, task: PeriodicTask, *, now_ms: int, immediately: bool) -> None:
        if not self._deadlines_ms:
            return
        deadline_ms = now_ms if immediately else now_ms + task.period_ms
        if not immediately and task.due_ms is not None:
            due_ms = task.due_ms(now_ms)
            if due_ms is not None and now_ms < due_ms < deadline_ms:
                deadline_ms = due_ms
        self._deadlines_ms[task.name] = deadline_ms
