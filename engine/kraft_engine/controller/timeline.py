"""Revertible in-memory state: the snapshot registry and its timeline collections.

The active controller applies records to memory *before* they commit, so it must be able to
throw away exactly the uncommitted suffix when it loses leadership or a metadata transaction
aborts, and it must answer reads from the committed view while uncommitted writes pile up.
Kafka solves both with `org.apache.kafka.timeline`: a `SnapshotRegistry` of snapshots keyed
by metadata offset ("epoch" in the registry's vocabulary), and collections that keep a
copy-on-write delta per snapshot. This module is that idea in Python.

Representation. Every collection holds its live ("current") state. Each snapshot holds, per
collection, the values that were overwritten or deleted *after* that snapshot was taken and
before the next one was — i.e. the state as of the snapshot, for just the keys that changed.
Reading at snapshot E walks the snapshots from E forward: the first delta that mentions the key
holds its value at E; if none does, the key has not changed since E and the current tier has
it. Reverting to E re-applies the deltas newest-first, so the oldest (E's) value wins.
"""

from __future__ import annotations

import weakref
from collections.abc import Collection, Iterator, Mapping
from itertools import repeat
from typing import Any, Generic, TypeVar, cast

__all__ = ["SnapshotRegistry", "TimelineHashMap", "TimelineHashSet", "TimelineValue"]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")


class _Absent:
    """Marks 'this key did not exist at the snapshot' inside a delta."""

    def __repr__(self) -> str:
        return "<absent>"


_ABSENT = _Absent()


class _Revertable:
    """A collection that a SnapshotRegistry can revert and reset."""

    def _revert_delta(self, delta: object) -> None:
        raise NotImplementedError

    def _reset(self) -> None:
        raise NotImplementedError


class _Snapshot:
    __slots__ = ("deltas", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        # Keyed by the registry-assigned id of each collection that changed after this snapshot.
        self.deltas: dict[int, object] = {}


class SnapshotRegistry:
    """Orders the snapshots (by non-decreasing epoch = metadata offset) that every timeline
    collection registered here can be read at or reverted to."""

    def __init__(self) -> None:
        self._snapshots: list[_Snapshot] = []
        self._index_by_epoch: dict[int, int] = {}
        # Weak, like Kafka: a collection nobody references any more (e.g. a deleted topic's
        # partition map) must not be kept alive just because a snapshot once saw it change.
        self._revertables: weakref.WeakValueDictionary[int, _Revertable] = weakref.WeakValueDictionary()
        self._next_id = 0

    # -- snapshots -------------------------------------------------------------------------

    def epochs(self) -> list[int]:
        """The epochs of the snapshots currently held, oldest first."""
        return [s.epoch for s in self._snapshots]

    def has_snapshot(self, epoch: int) -> bool:
        return epoch in self._index_by_epoch

    def latest_epoch(self) -> int | None:
        return self._snapshots[-1].epoch if self._snapshots else None

    def get_or_create_snapshot(self, epoch: int) -> None:
        """Take a snapshot of every collection at `epoch`; a no-op if the latest snapshot is
        already at `epoch`. Epochs must not go backwards."""
        latest = self.latest_epoch()
        if latest == epoch:
            return
        if latest is not None and latest > epoch:
            raise ValueError(
                f"Can't create a new in-memory snapshot at epoch {epoch} because there is "
                f"already a snapshot with epoch {latest}."
            )
        self._index_by_epoch[epoch] = len(self._snapshots)
        self._snapshots.append(_Snapshot(epoch))

    def revert_to_snapshot(self, epoch: int) -> None:
        """Restore every collection to its state at snapshot `epoch` and drop later snapshots."""
        index = self._index_by_epoch.get(epoch)
        if index is None:
            raise ValueError(f"No in-memory snapshot for epoch {epoch}. Snapshot epochs are: {self.epochs()}")
        # Newest first, so that for a key changed in several intervals the oldest saved value,
        # which is the value at `epoch`, is the one left standing.
        for snapshot in reversed(self._snapshots[index:]):
            for revertable_id, delta in snapshot.deltas.items():
                revertable = self._revertables.get(revertable_id)
                if revertable is not None:
                    revertable._revert_delta(delta)
        for snapshot in self._snapshots[index + 1 :]:
            del self._index_by_epoch[snapshot.epoch]
        del self._snapshots[index + 1 :]
        self._snapshots[index].deltas = {}

    def delete_snapshot(self, epoch: int) -> None:
        """Forget snapshot `epoch`. Its saved values still describe the previous snapshot's
        state for keys that previous snapshot did not save, so they are merged down."""
        index = self._index_by_epoch.get(epoch)
        if index is None:
            raise ValueError(f"No in-memory snapshot for epoch {epoch}. Snapshot epochs are: {self.epochs()}")
        snapshot = self._snapshots[index]
        if index > 0:
            previous = self._snapshots[index - 1]
            for revertable_id, delta in snapshot.deltas.items():
                revertable = self._revertables.get(revertable_id)
                if revertable is None:
                    continue
                if revertable_id in previous.deltas:
                    previous.deltas[revertable_id] = _merge_delta(previous.deltas[revertable_id], delta)
                else:
                    previous.deltas[revertable_id] = delta
        del self._snapshots[index]
        self._index_by_epoch = {s.epoch: i for i, s in enumerate(self._snapshots)}

    def delete_snapshots_up_to(self, epoch: int) -> None:
        """Drop every snapshot older than `epoch`: nothing can be read at or reverted to them
        once `epoch` is stable. The oldest snapshots' deltas are simply discarded."""
        keep_from = 0
        while keep_from < len(self._snapshots) and self._snapshots[keep_from].epoch < epoch:
            keep_from += 1
        if keep_from:
            del self._snapshots[:keep_from]
            self._index_by_epoch = {s.epoch: i for i, s in enumerate(self._snapshots)}

    def reset(self) -> None:
        """Empty every collection and drop every snapshot (before loading a Raft snapshot)."""
        self._snapshots.clear()
        self._index_by_epoch.clear()
        for revertable in list(self._revertables.values()):
            revertable._reset()

    # -- used by the collections -----------------------------------------------------------

    def _register(self, revertable: _Revertable) -> int:
        revertable_id = self._next_id
        self._next_id += 1
        self._revertables[revertable_id] = revertable
        return revertable_id

    def _latest_delta(self, revertable_id: int) -> object | None:
        """The delta the latest snapshot holds for this collection, or None (no snapshot, or
        the collection has not changed since it)."""
        if not self._snapshots:
            return None
        return self._snapshots[-1].deltas.get(revertable_id)

    def _has_snapshots(self) -> bool:
        return bool(self._snapshots)

    def _latest_dict_delta(self, revertable_id: int) -> dict[Any, Any] | None:
        """The latest snapshot's delta of a map or set (created empty if it has none yet), or None
        when there is no snapshot to save to."""
        if not self._snapshots:
            return None
        deltas = self._snapshots[-1].deltas
        delta = deltas.get(revertable_id)
        if delta is None:
            delta = deltas[revertable_id] = {}
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        return delta

    def _set_latest_delta(self, revertable_id: int, delta: object) -> None:
        self._snapshots[-1].deltas[revertable_id] = delta

    def _deltas_from(self, revertable_id: int, epoch: int) -> Iterator[object]:
        """This collection's deltas from snapshot `epoch` forward, oldest first."""
        index = self._index_by_epoch.get(epoch)
        if index is None:
            raise ValueError(f"No in-memory snapshot for epoch {epoch}. Snapshot epochs are: {self.epochs()}")
        for snapshot in self._snapshots[index:]:
            delta = snapshot.deltas.get(revertable_id)
            if delta is not None:
                yield delta


def _merge_delta(older: object, newer: object) -> object:
    """Combine two deltas so that the older one's saved values win."""
    if isinstance(older, dict) and isinstance(newer, dict):
        merged = dict(newer)
        merged.update(older)
        return merged
    return older


class TimelineHashMap(_Revertable, Generic[K, V]):
    """A dict whose state can be read as of any snapshot and reverted to one.

    Methods that take `epoch` read at that snapshot; `epoch=None` reads the current (latest,
    possibly uncommitted) state. Only the current state can be changed."""

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._current: dict[K, V] = {}
        self._id = registry._register(self)

    def _save(self, key: K) -> None:
        # Runs on every write, so it reads the registry's latest snapshot directly rather than
        # through three helper calls.
        snapshots = self._registry._snapshots
        if not snapshots:
            return
        deltas = snapshots[-1].deltas
        delta = deltas.get(self._id)
        if delta is None:
            saved: dict[K, object] = {key: self._current.get(key, _ABSENT)}
            deltas[self._id] = saved
            return
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        if key not in delta:
            delta[key] = self._current.get(key, _ABSENT)

    def _revert_delta(self, delta: object) -> None:
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        for key, value in delta.items():
            if value is _ABSENT:
                self._current.pop(key, None)
            else:
                self._current[key] = value

    def _reset(self) -> None:
        self._current.clear()

    def _view(self, epoch: int) -> dict[K, V]:
        view = dict(self._current)
        for delta in reversed(list(self._registry._deltas_from(self._id, epoch))):
            self._revert_view(view, delta)
        return view

    @staticmethod
    def _revert_view(view: dict[K, V], delta: object) -> None:
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        for key, value in delta.items():
            if value is _ABSENT:
                view.pop(key, None)
            else:
                view[key] = value

    # -- writes (current state only) -------------------------------------------------------

    def put(self, key: K, value: V) -> None:
        self._save(key)
        self._current[key] = value

    def __setitem__(self, key: K, value: V) -> None:
        self.put(key, value)

    def put_many(self, items: Mapping[K, V]) -> None:
        """`put` of every item, in one pass: the keys' values before are saved once, as `put`
        would save them."""
        delta = self._registry._latest_dict_delta(self._id)
        if delta is not None:
            # In C, not a Python step per key: a fence stores 100k partitions here.
            keys: Collection[K] = items.keys() - delta.keys() if delta else items.keys()
            delta.update(zip(keys, map(self._current.get, keys, repeat(_ABSENT)), strict=True))
        self._current.update(items)

    def put_same(self, keys: Collection[K], value: V, *, previous: V) -> None:
        """`put(key, value)` of each key, where the caller knows that every key holds `previous`
        now: the snapshot saves `previous` for them in one step (a fence moves tens of thousands
        of partitions from one shared registration to another)."""
        delta = self._registry._latest_dict_delta(self._id)
        if delta is not None:
            delta.update(dict.fromkeys(keys - delta.keys() if delta else keys, previous))
        self._current.update(dict.fromkeys(keys, value))

    def remove(self, key: K) -> V | None:
        """Remove `key`; return its previous value, or None if it was absent."""
        if key not in self._current:
            return None
        self._save(key)
        return self._current.pop(key)

    def __delitem__(self, key: K) -> None:
        if key not in self._current:
            raise KeyError(key)
        self.remove(key)

    def clear(self) -> None:
        for key in list(self._current):
            self.remove(key)

    # -- reads -----------------------------------------------------------------------------

    def get(self, key: K, epoch: int | None = None) -> V | None:
        if epoch is None:
            return self._current.get(key)
        for delta in self._registry._deltas_from(self._id, epoch):
            if not isinstance(delta, dict):
                raise TypeError("corrupt timeline delta")
            if key in delta:
                value = delta[key]
                return None if value is _ABSENT else value
        return self._current.get(key)

    def contains(self, key: K, epoch: int | None = None) -> bool:
        if epoch is None:
            return key in self._current
        for delta in self._registry._deltas_from(self._id, epoch):
            if not isinstance(delta, dict):
                raise TypeError("corrupt timeline delta")
            if key in delta:
                return delta[key] is not _ABSENT
        return key in self._current

    def __contains__(self, key: object) -> bool:
        return key in self._current

    def latest(self) -> Mapping[K, V]:
        """The current state itself, read-only by contract: for loops that read many keys and change
        none (a read through `get` is a method call per key). Valid until the next write."""
        return self._current

    def __getitem__(self, key: K) -> V:
        return self._current[key]

    def __len__(self) -> int:
        return len(self._current)

    def __iter__(self) -> Iterator[K]:
        return iter(list(self._current))

    def size(self, epoch: int | None = None) -> int:
        return len(self._current) if epoch is None else len(self._view(epoch))

    def items(self, epoch: int | None = None) -> list[tuple[K, V]]:
        return list(self._current.items()) if epoch is None else list(self._view(epoch).items())

    def keys(self, epoch: int | None = None) -> list[K]:
        return list(self._current) if epoch is None else list(self._view(epoch))

    def values(self, epoch: int | None = None) -> list[V]:
        return list(self._current.values()) if epoch is None else list(self._view(epoch).values())

    def snapshot(self, epoch: int | None = None) -> dict[K, V]:
        """A plain dict copy of the map at `epoch`."""
        return dict(self._current) if epoch is None else self._view(epoch)

    def __repr__(self) -> str:
        return f"TimelineHashMap({self._current!r})"


class TimelineHashSet(_Revertable, Generic[T]):
    """A set whose membership can be read as of any snapshot and reverted to one.

    It keeps its own set and saves, per snapshot, whether each changed element was present at
    that snapshot. (It was a TimelineHashMap of element -> None; a set of its own does the
    membership test and the save in a third of the calls, and the controller's reverse indexes
    change several of these sets for every partition record it replays.)"""

    def __init__(self, registry: SnapshotRegistry) -> None:
        self._registry = registry
        self._current: set[T] = set()
        self._id = registry._register(self)

    def _save(self, element: T, present: bool) -> None:
        snapshots = self._registry._snapshots
        if not snapshots:
            return
        deltas = snapshots[-1].deltas
        delta = deltas.get(self._id)
        if delta is None:
            saved: dict[T, bool] = {element: present}
            deltas[self._id] = saved
            return
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        if element not in delta:
            delta[element] = present

    def _revert_delta(self, delta: object) -> None:
        self._revert_view(self._current, delta)

    @staticmethod
    def _revert_view(view: set[T], delta: object) -> None:
        if not isinstance(delta, dict):
            raise TypeError("corrupt timeline delta")
        for element, present in delta.items():
            if present:
                view.add(element)
            else:
                view.discard(element)

    def _reset(self) -> None:
        self._current.clear()

    def _view(self, epoch: int) -> set[T]:
        view = set(self._current)
        for delta in reversed(list(self._registry._deltas_from(self._id, epoch))):
            self._revert_view(view, delta)
        return view

    # -- writes (current state only) -------------------------------------------------------

    def add(self, element: T) -> bool:
        """Add `element`; return True if it was not already present."""
        if element in self._current:
            return False
        self._save(element, False)
        self._current.add(element)
        return True

    def discard(self, element: T) -> bool:
        """Remove `element`; return True if it was present."""
        if element not in self._current:
            return False
        self._save(element, True)
        self._current.discard(element)
        return True

    def clear(self) -> None:
        for element in list(self._current):
            self.discard(element)

    def add_many(self, elements: Collection[T]) -> None:
        """`add` of each element, in one pass (set operations in C, not a Python step per element)."""
        current = self._current
        if self._registry._has_snapshots():
            self._save_many(set(elements).difference(current), present=False)
        current.update(elements)

    def discard_many(self, elements: Collection[T]) -> None:
        """`discard` of each element, in one pass."""
        current = self._current
        if self._registry._has_snapshots():
            self._save_many(current.intersection(elements), present=True)
        current.difference_update(elements)

    def _save_many(self, elements: set[T], *, present: bool) -> None:
        delta = self._registry._latest_dict_delta(self._id) if elements else None
        if delta is not None:
            delta.update(dict.fromkeys(elements.difference(delta.keys()) if delta else elements, present))

    # -- reads -----------------------------------------------------------------------------

    def contains(self, element: T, epoch: int | None = None) -> bool:
        if epoch is None:
            return element in self._current
        for delta in self._registry._deltas_from(self._id, epoch):
            if not isinstance(delta, dict):
                raise TypeError("corrupt timeline delta")
            if element in delta:
                return bool(delta[element])
        return element in self._current

    def __contains__(self, element: object) -> bool:
        return element in self._current

    def __len__(self) -> int:
        return len(self._current)

    def __iter__(self) -> Iterator[T]:
        return iter(list(self._current))

    def size(self, epoch: int | None = None) -> int:
        return len(self._current) if epoch is None else len(self._view(epoch))

    def elements(self, epoch: int | None = None) -> list[T]:
        return list(self._current) if epoch is None else list(self._view(epoch))

    def __repr__(self) -> str:
        return f"TimelineHashSet({self._current!r})"


class TimelineValue(_Revertable, Generic[T]):
    """One value (an int, an Optional, a frozen object) that can be read as of any snapshot
    and reverted to one. Kafka's TimelineLong/TimelineInteger/TimelineObject in one."""

    def __init__(self, registry: SnapshotRegistry, initial: T) -> None:
        self._registry = registry
        self._initial = initial
        self._current = initial
        self._id = registry._register(self)

    def _revert_delta(self, delta: object) -> None:
        if not isinstance(delta, _SavedValue):
            raise TypeError("corrupt timeline delta")
        self._current = cast("_SavedValue[T]", delta).value

    def _reset(self) -> None:
        self._current = self._initial

    def get(self, epoch: int | None = None) -> T:
        if epoch is None:
            return self._current
        for delta in self._registry._deltas_from(self._id, epoch):
            if not isinstance(delta, _SavedValue):
                raise TypeError("corrupt timeline delta")
            return cast("_SavedValue[T]", delta).value
        return self._current

    def set(self, value: T) -> None:
        if self._registry._has_snapshots() and self._registry._latest_delta(self._id) is None:
            self._registry._set_latest_delta(self._id, _SavedValue(self._current))
        self._current = value

    def __repr__(self) -> str:
        return f"TimelineValue({self._current!r})"


class _SavedValue(Generic[T]):
    """A TimelineValue's delta: its value as of the snapshot."""

    __slots__ = ("value",)

    def __init__(self, value: T) -> None:
        self.value = value
