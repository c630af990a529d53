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

So while a large request is decoded, handled and encoded (`large_request()`), its builders call
`park()` every few hundred items: `gc.freeze()` moves every object tracked so far into the
collector's permanent generation (a constant-time list splice), where no collection walks it.
Objects that die there are freed by reference counting as usual. When the last large request in
flight is done, `gc.unfreeze()` hands the survivors back to the oldest generation, so anything
parked meanwhile that has since become cyclic garbage is collected at the next full collection
(the cost: such garbage waits until no large request is in flight). And the owner of a large
entity hands its big arrays to `release()` in a worker thread (`disown()` takes them out of the
entity), which frees them a slice at a time, so the loop gets the GIL between slices.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["disown", "large_request", "park", "release"]

_lock = threading.Lock()
_holders = 0

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
            if _holders == 0:
                gc.unfreeze()


def park() -> None:
    """Move what is tracked now out of the collector's reach, while a large request is in flight
    (elsewhere it does nothing)."""
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
