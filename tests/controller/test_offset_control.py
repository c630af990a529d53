"""Stable offset and metadata transactions (KIP-868): readers never see a half transaction."""

from __future__ import annotations

import pytest

from kraft_engine.controller.offset_control import OffsetControlManager
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap


def _standby() -> tuple[OffsetControlManager, TimelineHashMap[str, int]]:
    registry = SnapshotRegistry()
    return OffsetControlManager(registry), TimelineHashMap(registry)


def test_an_open_transaction_holds_the_stable_offset_before_it() -> None:
    offsets, state = _standby()
    state.put("before", 0)
    offsets.handle_commit_batch(last_offset=4, epoch=1)
    offsets.replay_begin_transaction(5)
    state.put("inside", 6)
    offsets.handle_commit_batch(last_offset=7, epoch=1)
    assert offsets.last_stable_offset == 4
    assert state.snapshot(4) == {"before": 0}
    offsets.replay_end_transaction(8)
    offsets.handle_commit_batch(last_offset=8, epoch=1)
    assert offsets.last_stable_offset == 8
    assert state.snapshot(8) == {"before": 0, "inside": 6}


def test_an_aborted_transaction_is_undone() -> None:
    offsets, state = _standby()
    offsets.handle_commit_batch(last_offset=1, epoch=1)
    offsets.replay_begin_transaction(2)
    state.put("inside", 3)
    offsets.replay_abort_transaction(4)
    assert state.snapshot() == {}
    offsets.handle_commit_batch(last_offset=4, epoch=1)
    assert offsets.last_stable_offset == 4


def test_transaction_markers_out_of_order_are_refused() -> None:
    offsets, _ = _standby()
    with pytest.raises(RuntimeError, match="EndTransactionRecord at 3 because there is no open transaction"):
        offsets.replay_end_transaction(3)
    with pytest.raises(RuntimeError, match="AbortTransactionRecord at 3 because there is no open transaction"):
        offsets.replay_abort_transaction(3)
    offsets.replay_begin_transaction(4)
    with pytest.raises(RuntimeError, match="BeginTransactionRecord at 6 because the transaction at 4 was never closed"):
        offsets.replay_begin_transaction(6)


def test_deactivate_discards_exactly_the_uncommitted_suffix() -> None:
    offsets, state = _standby()
    offsets.activate()
    state.put("a", 1)
    offsets.handle_schedule_append(0)
    state.put("b", 2)
    offsets.handle_schedule_append(1)
    offsets.handle_commit_batch(last_offset=0, epoch=1)
    offsets.deactivate()
    assert state.snapshot() == {"a": 1}
    assert not offsets.active()
