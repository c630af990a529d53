"""The cyclic garbage collector around the controller's bulk work.

CPython's collector stops every thread while it runs, raft's included. With a 100k-partition image
in memory a full collection takes about a second, and fencing one broker (100k records, as many
new partition registrations and image maps) used to trigger five of them: a third of the fence's
cost, and a stall of raft's loop each time. `collector_paused` runs one controller event without
the collector and, after a bulk event, moves its survivors (now the bulk of the long-lived image)
to the permanent generation with `gc.freeze()` (constant time), so that later full collections
only scan what is new.

Objects are still freed by reference counting. Only cyclic garbage that exists at a freeze is
never reclaimed; the image and the controller's timeline are acyclic data, so that is small.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["BULK_ALLOCATIONS", "collector_paused"]

#: Once blocks have left this many new tracked objects behind since the last freeze, the
#: long-lived state grew in bulk (one fence at 100k partitions, or ~50 CreateTopics of 100 topics).
BULK_ALLOCATIONS = 100_000

_left_behind = 0


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off collections for the block; freeze once blocks have left a bulk of objects behind."""
    global _left_behind
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        _left_behind += gc.get_count()[0]
        if _left_behind >= BULK_ALLOCATIONS:
            gc.freeze()
            _left_behind = 0
        if was_enabled:
            gc.enable()
