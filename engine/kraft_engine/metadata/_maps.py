"""Copy-on-write maps: the structure sharing that keeps image construction cheap.

An image's maps are never mutated. A delta produces a new map only for a sub-image it touched,
by copying the old one once and applying all its changes, so untouched sub-images and untouched
values are shared by reference between consecutive images.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, TypeVar

__all__ = ["EMPTY_MAP", "applied", "frozen_map", "thawed"]

K = TypeVar("K")
V = TypeVar("V")

# Typed Any so that one shared empty view can stand for any empty map.
EMPTY_MAP: Mapping[Any, Any] = MappingProxyType({})


def frozen_map(values: dict[K, V]) -> Mapping[K, V]:
    """A read-only view of `values`; the caller hands over ownership and never mutates it again."""
    return MappingProxyType(values)


def thawed(values: Mapping[K, V]) -> dict[K, V]:
    """A private mutable copy of `values`.

    A read-only view is copied through its dict's own `copy()`, which reuses the stored hashes:
    `dict(view)` would re-hash every key, and Uuid keys hash in Python, which made copying a
    10k-topic map cost milliseconds instead of tens of microseconds.
    """
    if isinstance(values, MappingProxyType):
        return values.copy()
    return dict(values)


def applied(base: Mapping[K, V], changes: Mapping[K, V | None]) -> Mapping[K, V]:
    """`base` with `changes` applied (None removes); `base` itself when there is nothing to change."""
    if not changes:
        return base
    result = thawed(base)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return MappingProxyType(result)
