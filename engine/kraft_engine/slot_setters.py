"""Filling frozen, slotted dataclasses through their slot descriptors.

A frozen dataclass's `__init__` stores each field through `object.__setattr__`. The replay and
generation paths build one such object per partition record (a `PartitionRegistration` per
PartitionRecord or PartitionChangeRecord replayed, a PartitionChangeRecord per partition of a
fence): hundreds of thousands at 100k partitions, where storing through the slot descriptors costs
a third to a half as much. `slot_setters` gives a class's setters in the order the caller names
its fields, and refuses when the names are not exactly the class's fields, so that a field added
to the class cannot be left unset silently. (A caller must also do whatever the class's
`__post_init__` would have checked.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any, TypeVar

from kraft_engine.invariant import require

__all__ = ["slot_setters"]

T = TypeVar("T")


def slot_setters(cls: type[T], names: tuple[str, ...]) -> tuple[Callable[[T, Any], None], ...]:
    """The `__set__` of each of `cls`'s slots named in `names`, which must be all its fields, in order."""
    require(
        tuple(field.name for field in fields(cls)) == names,  # type: ignore[arg-type]
        f"{cls.__name__}'s fields are not {names}: its slot setters are out of step",
    )
    return tuple(cls.__dict__[name].__set__ for name in names)
