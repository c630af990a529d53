"""Invariant checks that survive `python -O`.

`assert` statements vanish under -O, and a consensus engine must never run on with a broken
invariant. `require()` raises `InvariantViolation`, which callers never catch: it means a bug.
"""

from __future__ import annotations

__all__ = ["InvariantViolation", "require"]


class InvariantViolation(RuntimeError):
    """A broken internal invariant: the engine's state can no longer be trusted."""


def require(condition: bool, message: str) -> None:
    """Raise `InvariantViolation(message)` unless `condition` holds."""
    if not condition:
        raise InvariantViolation(message)
