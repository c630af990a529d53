"""The write → apply → commit loop: purgatory, stable reads, batching, renounce, standby replay.

These tests drive the loop with a one-field test record so that they check the discipline
itself; the managers' own records are exercised in the per-manager tests."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode

from kraft_engine.controller.event_handling import ControllerFault, EventHandling
from kraft_engine.controller.results import (
    CommittedBatch,
    ControllerApiError,
    ControllerResult,
    RecordAndVersion,
)
from kraft_engine.controller.timeline import TimelineHashMap


@dataclass(frozen=True)
class _Put:
    key: str
    value: int


class _Loop:
    """An EventHandling with one timeline map fed by _Put records."""

    def __init__(self, max_records_per_batch: int = 10000) -> None:
        self.events = EventHandling(node_id=1, max_records_per_batch=max_records_per_batch)
        self.state: TimelineHashMap[str, int] = TimelineHashMap(self.events.snapshot_registry)
        self.events.register_replayer(_Put, self._replay)

    def _replay(self, record: _Put, offset: int) -> None:
        if record.value < 0:
            raise ValueError("negative")
        self.state.put(record.key, record.value)

    def put(self, *pairs: tuple[str, int], atomic: bool = True) -> int:
        records = [RecordAndVersion(_Put(k, v), 0) for k, v in pairs]
        return self.events.write("put", lambda: ControllerResult(records, f"ok {len(records)}", atomic))

    def commit_appends(self) -> None:
        for append in self.events.take_effects().appends:
            records = tuple(r.record for r in append.records)
            self.events.handle_commit(CommittedBatch(append.base_offset, append.epoch, records, append.last_offset))

    def stable_view(self) -> dict[str, int]:
        return self.events.read(self.state.snapshot)


def test_a_write_is_applied_at_once_but_completes_and_becomes_readable_only_when_committed() -> None:
    loop = _Loop()
    loop.events.claim(epoch=3, log_end_offset=10)
    token = loop.put(("a", 1))
    assert loop.state.get("a") == 1  # applied in memory
    assert loop.stable_view() == {}  # reads see only the stable offset
    effects = loop.events.take_effects()
    assert effects.completed == []
    [append] = effects.appends
    assert (append.epoch, append.base_offset, append.records) == (3, 10, (RecordAndVersion(_Put("a", 1), 0),))

    loop.events.handle_commit(CommittedBatch(10, 3, (_Put("a", 1),), 10))
    assert loop.events.take_effects().completed == [(token, "ok 1")]
    assert loop.stable_view() == {"a": 1}


def test_renounce_reverts_uncommitted_writes_and_fails_them_with_not_controller() -> None:
    loop = _Loop()
    loop.events.claim(epoch=1, log_end_offset=0)
    loop.put(("a", 1))
    loop.commit_appends()
    loop.events.take_effects()
    pending = loop.put(("a", 2), ("b", 3))
    loop.events.renounce()
    effects = loop.events.take_effects()
    assert [(f.token, f.error.error_code) for f in effects.failed] == [(pending, ErrorCode.not_controller)]
    assert effects.resign_epoch == 1
    assert loop.state.snapshot() == {"a": 1}
    # A standby refuses writes the same way.
    refused = loop.put(("c", 1))
    assert [(f.token, f.error.error_code) for f in loop.events.take_effects().failed] == [
        (refused, ErrorCode.not_controller)
    ]


def test_a_write_that_writes_nothing_waits_for_the_writes_before_it() -> None:
    loop = _Loop()
    loop.events.claim(epoch=1, log_end_offset=0)
    empty = loop.events.write("noop", lambda: ControllerResult((), "read"))
    assert loop.events.take_effects().completed == [(empty, "read")]
    first = loop.put(("a", 1))
    second = loop.events.write("noop", lambda: ControllerResult((), "after"))
    effects = loop.events.take_effects()
    assert effects.completed == []
    loop.events.handle_commit(CommittedBatch(0, 1, (_Put("a", 1),), 0))
    assert loop.events.take_effects().completed == [(first, "ok 1"), (second, "after")]


def test_non_atomic_results_are_split_and_atomic_ones_are_capped() -> None:
    loop = _Loop(max_records_per_batch=2)
    loop.events.claim(epoch=1, log_end_offset=5)
    loop.put(("a", 1), ("b", 2), ("c", 3), atomic=False)
    appends = loop.events.take_effects().appends
    assert [(a.base_offset, len(a.records)) for a in appends] == [(5, 2), (7, 1)]
    with pytest.raises(ControllerFault, match="atomically commit 3 records"):
        loop.put(("a", 1), ("b", 2), ("c", 3), atomic=True)


def test_client_errors_fail_only_that_write_and_replay_failures_are_fatal() -> None:
    loop = _Loop()
    loop.events.claim(epoch=1, log_end_offset=0)

    def refuse() -> ControllerResult[str]:
        raise ControllerApiError(ErrorCode.invalid_request, "no")

    token = loop.events.write("refuse", refuse)
    [failed] = loop.events.take_effects().failed
    assert (failed.token, failed.error.error_code, failed.error.message) == (token, ErrorCode.invalid_request, "no")
    with pytest.raises(ControllerFault, match="Unable to apply _Put record at offset 0 on active controller"):
        loop.put(("a", -1))


def test_a_standby_replays_committed_batches_and_refuses_unknown_records() -> None:
    loop = _Loop()
    loop.events.handle_commit(CommittedBatch(0, 1, (_Put("a", 1), _Put("b", 2)), 1))
    assert loop.stable_view() == {"a": 1, "b": 2}
    assert loop.events.last_stable_offset() == 1
    with pytest.raises(ControllerFault, match="Unhandled record type object at offset 2"):
        loop.events.handle_commit(CommittedBatch(2, 1, (object(),), 2))


def test_failover_keeps_committed_state_and_writes_after_the_log_end() -> None:
    loop = _Loop()
    loop.events.handle_commit(CommittedBatch(0, 1, (_Put("a", 1),), 0))
    loop.events.claim(epoch=2, log_end_offset=1)
    loop.put(("b", 2))
    [append] = loop.events.take_effects().appends
    assert append.base_offset == 1 and append.epoch == 2
    assert loop.events.active_controller_count() == 1


def test_loading_a_snapshot_replaces_state_and_is_fatal_on_the_active_controller() -> None:
    loop = _Loop()
    loop.events.handle_commit(CommittedBatch(0, 1, (_Put("old", 1),), 0))
    loop.events.handle_load_snapshot(last_contained_offset=99, epoch=4, records=[_Put("new", 2)])
    assert loop.stable_view() == {"new": 2}
    assert loop.events.last_stable_offset() == 99
    loop.events.claim(epoch=5, log_end_offset=100)
    with pytest.raises(ControllerFault, match="active controller"):
        loop.events.handle_load_snapshot(last_contained_offset=120, epoch=5, records=[])
