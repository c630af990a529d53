"""The cyclic garbage collector around the controller's bulk work.

CPython's collector stops every thread while it runs, raft's included. With a 100k-partition image
in memory a full collection takes about a second, and fencing one broker (100k records, as many
new partition registrations and image maps) used to trigger five of them: a third of the fence's
cost, and a stall of raft's loop each time. `collector_paused` runs one controller event without
the collector and, after a bulk event, moves its survivors (now the bulk of the long-lived image)
to the permanent generation with `gc.freeze()` (constant time), so that later full collections
only scan what is new.

The pause is shared between threads: the controller thread pauses for each event and the snapshot
writer (`controller_service`) for the whole of a snapshot's encoding, whose hundred thousand
short-lived records would otherwise set off full collections on that thread, each a stop of every
thread, raft's loop included. The collector runs again once the last pause has ended.

Objects are still freed by reference counting. Only cyclic garbage that exists at a freeze is
never reclaimed; the image and the controller's timeline are acyclic data, so that is small.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["BULK_ALLOCATIONS", "collector_paused"]

#: Once blocks have left this many new tracked objects behind since the last freeze, the
#: long-lived state grew in bulk (one fence at 100k partitions, or ~50 CreateTopics of 100 topics).
BULK_ALLOCATIONS = 100_000

_lock = threading.Lock()
_left_behind = 0
_pauses = 0
_enable_after = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Hold off collections for the block (on any thread, blocks may overlap); once the last
    overlapping block ends, freeze if blocks have left a bulk of objects behind, and let the
    collector run again if it ran before the first."""
    global _pauses, _enable_after
    with _lock:
        if _pauses == 0:
            _enable_after = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        _resume()


def _resume() -> None:
    global _pauses, _left_behind
    with _lock:
        _pauses -= 1
        if _pauses:
            return
        _left_behind += gc.get_count()[0]
        if _left_behind >= BULK_ALLOCATIONS:
            gc.freeze()
            _left_behind = 0
        if _enable_after:
            gc.enable()
