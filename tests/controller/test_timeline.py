"""The timeline collections: reads as of a snapshot, revert, snapshot deletion, reset."""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet, TimelineValue


def test_map_reads_as_of_each_snapshot_and_reverts() -> None:
    registry = SnapshotRegistry()
    topics: TimelineHashMap[str, int] = TimelineHashMap(registry)
    topics.put("a", 1)
    registry.get_or_create_snapshot(100)
    topics.put("a", 2)
    topics.put("b", 3)
    registry.get_or_create_snapshot(130)
    topics.remove("a")
    topics.put("c", 4)

    assert topics.snapshot() == {"b": 3, "c": 4}
    assert topics.snapshot(130) == {"a": 2, "b": 3}
    assert topics.snapshot(100) == {"a": 1}
    assert topics.get("a", 100) == 1
    assert topics.get("a", 130) == 2
    assert topics.get("a") is None
    assert topics.contains("b", 130)
    assert not topics.contains("b", 100)
    assert topics.size(100) == 1

    registry.revert_to_snapshot(130)
    assert topics.snapshot() == {"a": 2, "b": 3}
    assert registry.epochs() == [100, 130]
    registry.revert_to_snapshot(100)
    assert topics.snapshot() == {"a": 1}
    assert registry.epochs() == [100]


def test_snapshot_epochs_cannot_go_backwards_and_unknown_epochs_are_refused() -> None:
    registry = SnapshotRegistry()
    registry.get_or_create_snapshot(5)
    registry.get_or_create_snapshot(5)  # idempotent
    with pytest.raises(ValueError, match="already a snapshot with epoch 5"):
        registry.get_or_create_snapshot(4)
    with pytest.raises(ValueError, match="No in-memory snapshot for epoch 3"):
        registry.revert_to_snapshot(3)
    values: TimelineHashMap[int, int] = TimelineHashMap(registry)
    with pytest.raises(ValueError, match="No in-memory snapshot for epoch 7"):
        values.get(1, 7)


def test_value_and_set_revert() -> None:
    registry = SnapshotRegistry()
    level: TimelineValue[int | None] = TimelineValue(registry, None)
    fenced: TimelineHashSet[int] = TimelineHashSet(registry)
    registry.get_or_create_snapshot(0)
    level.set(7)
    fenced.add(1)
    registry.get_or_create_snapshot(1)
    level.set(8)
    fenced.add(2)
    fenced.discard(1)
    assert level.get() == 8 and level.get(1) == 7 and level.get(0) is None
    assert fenced.elements(1) == [1] and sorted(fenced) == [2]
    registry.revert_to_snapshot(0)
    assert level.get() is None
    assert len(fenced) == 0


def test_delete_snapshots_up_to_keeps_later_reads_right() -> None:
    registry = SnapshotRegistry()
    values: TimelineHashMap[str, int] = TimelineHashMap(registry)
    registry.get_or_create_snapshot(1)
    values.put("x", 1)
    registry.get_or_create_snapshot(2)
    values.put("x", 2)
    registry.get_or_create_snapshot(3)
    values.put("x", 3)
    registry.delete_snapshots_up_to(3)
    assert registry.epochs() == [3]
    assert values.get("x", 3) == 2
    registry.revert_to_snapshot(3)
    assert values.get("x") == 2


def test_deleting_a_middle_snapshot_merges_its_saved_values_down() -> None:
    registry = SnapshotRegistry()
    values: TimelineHashMap[str, int] = TimelineHashMap(registry)
    values.put("x", 0)
    registry.get_or_create_snapshot(1)
    values.put("y", 1)
    registry.get_or_create_snapshot(2)
    values.put("x", 2)
    registry.delete_snapshot(2)
    assert values.snapshot(1) == {"x": 0}
    registry.revert_to_snapshot(1)
    assert values.snapshot() == {"x": 0}


def test_reset_empties_everything() -> None:
    registry = SnapshotRegistry()
    values: TimelineHashMap[str, int] = TimelineHashMap(registry)
    level: TimelineValue[int] = TimelineValue(registry, -1)
    registry.get_or_create_snapshot(1)
    values.put("x", 1)
    level.set(3)
    registry.reset()
    assert values.snapshot() == {} and level.get() == -1 and registry.epochs() == []


def test_a_dropped_collection_does_not_break_revert() -> None:
    registry = SnapshotRegistry()
    registry.get_or_create_snapshot(1)
    transient: TimelineHashMap[str, int] = TimelineHashMap(registry)
    transient.put("x", 1)
    del transient
    gc.collect()
    registry.revert_to_snapshot(1)
    assert registry.epochs() == [1]


# -- model-based property test ---------------------------------------------------------------

_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.integers(0, 100)),
        st.tuples(st.just("remove"), st.integers(0, 5), st.just(0)),
        # The bulk writes (a fence's replay): keys a, a+1, a+2 at once.
        st.tuples(st.just("put_many"), st.integers(0, 5), st.integers(0, 100)),
        st.tuples(st.just("remove_many"), st.integers(0, 5), st.just(0)),
        # A group of keys that hold one value moving to another (a fence's replay of a run).
        st.tuples(st.just("put_same"), st.integers(0, 5), st.integers(0, 100)),
        st.tuples(st.just("set"), st.just(0), st.integers(0, 100)),
        st.tuples(st.just("snapshot"), st.just(0), st.integers(0, 2)),
        st.tuples(st.just("revert"), st.integers(0, 10), st.just(0)),
        st.tuples(st.just("delete_up_to"), st.integers(0, 10), st.just(0)),
        st.tuples(st.just("delete"), st.integers(0, 10), st.just(0)),
        st.tuples(st.just("read"), st.integers(0, 10), st.integers(0, 5)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(_ops)
def test_random_operations_match_a_copying_model(ops: list[tuple[str, int, int]]) -> None:
    registry = SnapshotRegistry()
    values: TimelineHashMap[int, int] = TimelineHashMap(registry)
    members: TimelineHashSet[int] = TimelineHashSet(registry)
    scalar: TimelineValue[int] = TimelineValue(registry, 0)
    # The model keeps a full copy of the state at every snapshot.
    model: dict[int, int] = {}
    model_scalar = 0
    model_snapshots: list[tuple[int, dict[int, int], int]] = []
    next_epoch = 0
    for op, a, b in ops:
        if op == "put":
            values.put(a, b)
            members.add(a)
            model[a] = b
        elif op == "remove":
            values.remove(a)
            members.discard(a)
            model.pop(a, None)
        elif op == "put_many":
            keys = [a, a + 1, a + 2]
            values.put_many({key: b + key for key in keys})
            members.add_many(keys)
            model.update({key: b + key for key in keys})
        elif op == "put_same":
            keys = [key for key in (a, a + 1, a + 2) if key in model and model[key] == model.get(a)]
            if keys:
                values.put_same(keys, b, previous=values.get(a))  # type: ignore[arg-type]
                members.add_many(keys)
                model.update(dict.fromkeys(keys, b))
        elif op == "remove_many":
            keys = [a, a + 1, a + 2]
            for key in keys:
                values.remove(key)
                model.pop(key, None)
            members.discard_many(keys)
        elif op == "set":
            scalar.set(b)
            model_scalar = b
        elif op == "snapshot":
            next_epoch += b
            registry.get_or_create_snapshot(next_epoch)
            if not model_snapshots or model_snapshots[-1][0] != next_epoch:
                model_snapshots.append((next_epoch, dict(model), model_scalar))
            next_epoch += 1
        elif not model_snapshots:
            continue
        elif op == "revert":
            index = a % len(model_snapshots)
            epoch, state, saved_scalar = model_snapshots[index]
            registry.revert_to_snapshot(epoch)
            model = dict(state)
            model_scalar = saved_scalar
            del model_snapshots[index + 1 :]
        elif op == "delete_up_to":
            epoch = model_snapshots[a % len(model_snapshots)][0]
            registry.delete_snapshots_up_to(epoch)
            model_snapshots = [s for s in model_snapshots if s[0] >= epoch]
        elif op == "delete":
            index = a % len(model_snapshots)
            registry.delete_snapshot(model_snapshots[index][0])
            del model_snapshots[index]
        elif op == "read":
            epoch, state, saved_scalar = model_snapshots[a % len(model_snapshots)]
            assert values.snapshot(epoch) == state
            assert values.get(b, epoch) == state.get(b)
            assert members.contains(b, epoch) == (b in state)
            assert scalar.get(epoch) == saved_scalar
        assert values.snapshot() == model
        assert set(members) == set(model)
        assert scalar.get() == model_scalar
        assert registry.epochs() == [s[0] for s in model_snapshots]
    for epoch, state, saved_scalar in model_snapshots:
        assert values.snapshot(epoch) == state
        assert sorted(members.elements(epoch)) == sorted(state)
        assert scalar.get(epoch) == saved_scalar
