"""Write completions parked until the records they depend on are stable.

A controller write must not be acknowledged before its records commit (and before any metadata
transaction around them closes). Kafka parks the caller's future in a DeferredEventQueue keyed
by the offset of its last record. The pure controller has no futures: it parks an opaque
completion token with the response, and hands the (token, response) pairs back to the shell
once the stable offset reaches the offset. The shell maps tokens to its futures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from kraft_engine.invariant import require

__all__ = ["Purgatory"]

R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class _Parked(Generic[R]):
    offset: int
    token: int
    response: R


class Purgatory(Generic[R]):
    def __init__(self) -> None:
        # Offsets only grow, so appending keeps this sorted.
        self._parked: list[_Parked[R]] = []

    def __len__(self) -> int:
        return len(self._parked)

    def highest_pending_offset(self) -> int | None:
        return self._parked[-1].offset if self._parked else None

    def add(self, *, offset: int, token: int, response: R) -> None:
        require(
            not self._parked or self._parked[-1].offset <= offset,
            f"purgatory offsets must not go backwards: {offset} after {self.highest_pending_offset()}",
        )
        self._parked.append(_Parked(offset, token, response))

    def complete_up_to(self, offset: int) -> list[tuple[int, R]]:
        """Release every completion parked at or below `offset`, oldest first."""
        released = 0
        while released < len(self._parked) and self._parked[released].offset <= offset:
            released += 1
        done = [(p.token, p.response) for p in self._parked[:released]]
        del self._parked[:released]
        return done

    def fail_all(self) -> list[int]:
        """Drop every parked completion (leadership is lost) and return their tokens."""
        tokens = [p.token for p in self._parked]
        self._parked.clear()
        return tokens
