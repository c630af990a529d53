"""What a large request's objects cost the event loop beyond its decode, and how we avoid it.

A large request allocates objects by the million: a 20 MiB DeleteTopics of 838,860 topics
decodes into 838,860 entities and is answered with as many results. Two costs of those objects
fall on whichever thread happens to trigger them, with the GIL held throughout, so they stall the
event loop (raft's loop) even when the work itself runs in a worker thread:

- CPython's full garbage collection walks every tracked object. As a request's objects pile up,
  the collector's rule (a full collection once the objects promoted since the last one exceed a
  quarter of the survivors) fires again and again over all of them: 0.3-0.9 s each on the shared
  test machine. Walking them finds nothing: a request's entities and its results hold no cycles
  and die by reference counting.
- Dropping the last reference to a tuple of 838,860 entities frees them all in one C call: about
  0.2 s, on the loop when a coroutine's frame held that reference.

So while a large request of many items is decoded, handled and encoded (`large_request()`), its
builders call `park()` every `PARK_EVERY_ITEMS` items: `gc.freeze()` moves every object tracked so
far into the collector's permanent generation (a constant-time list splice), where no collection
walks it. Objects there are still freed by reference counting, so the request's own objects leave
it as soon as they die. The freeze is never undone, as `server/collector.py` does for the
controller's bulk work (an unfreeze would hand that collector's frozen image back to the full
collections): only cyclic garbage that exists at a park is never reclaimed, which parking every
ten thousand items, and only inside a large request, keeps rare. And the owner of a large entity
hands its big arrays to `release()` in a worker thread (`disown()` takes them out of the entity),
which frees them a slice at a time, so the loop gets the GIL between slices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["PARK_EVERY_ITEMS", "disown", "large_request", "park", "release"]

_lock = threading.Lock()
_holders = 0

PARK_EVERY_ITEMS = 10_000
"""How often a large request's builders park: far below the ~25 % growth that triggers a full
collection, few enough parks that little cyclic garbage is ever caught in one."""

_RELEASE_SLICE = 1000
"""Items freed per step of `release`: the eval loop may hand the GIL over between steps."""


@contextlib.contextmanager
def large_request() -> Iterator[None]:
    """The span of one large request; `park()` only parks inside one."""
    global _holders
    with _lock:
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1


def park() -> None:
    """Move what is tracked now out of the collector's reach for good, while a large request is
    in flight (elsewhere it does nothing)."""
    with _lock:
        if _holders > 0:
            gc.freeze()


def disown(entity: Any) -> list[list[Any]]:
    """The items of `entity`'s top-level arrays longer than a slice, as lists the caller now owns:
    once the caller drops `entity`, those items live only in these lists (dropping the entity
    only decrements their counts) and `release` frees them a slice at a time."""
    return [list(value) for f in dataclasses.fields(entity)
            if type(value := getattr(entity, f.name)) is tuple and len(value) > _RELEASE_SLICE]


def release(parts: list[list[Any]]) -> None:
    """Free `disown`'s lists a slice at a time (in a worker thread, so the loop keeps its turns)."""
    for items in parts:
        while items:
            del items[-_RELEASE_SLICE:]
