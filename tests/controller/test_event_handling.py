"""The write → apply → commit loop: purgatory, stable reads, batching, renounce, standby replay.

These tests drive the loop with a one-field test record so that they check the discipline
itself; the managers' own records are exercised in the per-manager tests. The raft layer is the
harness's `FakeRaft`: it owns the offsets and writes a control batch of its own after every batch
the controller appends, so each test also checks that the controller uses raft's offsets."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from kio.schema.errors import ErrorCode

from kraft_engine.controller.event_handling import ControllerFault, EventHandling
from kraft_engine.controller.periodic_tasks import PeriodicTask
from kraft_engine.controller.results import (
    ControllerApiError,
    ControllerResult,
    RecordAndVersion,
)
from kraft_engine.controller.timeline import TimelineHashMap
from kraft_engine.raft import CommittedBatch

from .harness import FakeRaft


@dataclass(frozen=True)
class _Put:
    key: str
    value: int


class _Loop:
    """An EventHandling with one timeline map fed by _Put records."""

    def __init__(self, max_records_per_batch: int = 10000, *, control_between_appends: bool = True) -> None:
        self.raft = FakeRaft(control_between_appends=control_between_appends)
        self.events = EventHandling(node_id=1, raft=self.raft, max_records_per_batch=max_records_per_batch)
        self.state: TimelineHashMap[str, int] = TimelineHashMap(self.events.snapshot_registry)
        self.events.register_replayer(_Put, self._replay)

    def _replay(self, record: _Put, offset: int) -> None:
        if record.value < 0:
            raise ValueError("negative")
        self.state.put(record.key, record.value)

    def claim(self, *, epoch: int, log_end_offset: int) -> None:
        """Raft elected this node: its LeaderChangeMessage takes `log_end_offset`, then the claim."""
        self.raft.start_epoch(epoch, log_end_offset=log_end_offset)
        self.events.claim(epoch=epoch)

    def put(self, *pairs: tuple[str, int], atomic: bool = True) -> int:
        records = [RecordAndVersion(_Put(k, v), 0) for k, v in pairs]
        return self.events.write("put", lambda: ControllerResult(records, f"ok {len(records)}", atomic))

    def commit_appends(self) -> None:
        for batch in self.raft.log[self.raft.delivered :]:
            records = tuple(r.record for r in batch.records)
            self.events.handle_commit(CommittedBatch(batch.base_offset, batch.epoch, records, batch.last_offset))
        self.raft.delivered = len(self.raft.log)

    def stable_view(self) -> dict[str, int]:
        return self.events.read(self.state.snapshot)


def test_a_write_is_applied_at_once_but_completes_and_becomes_readable_only_when_committed() -> None:
    loop = _Loop()
    loop.claim(epoch=3, log_end_offset=10)
    token = loop.put(("a", 1))
    assert loop.state.get("a") == 1  # applied in memory
    assert loop.stable_view() == {}  # reads see only the stable offset
    effects = loop.events.take_effects()
    assert effects.completed == []
    [leader_change, append, _] = loop.raft.log
    assert leader_change.records == () and leader_change.base_offset == 10
    assert (append.epoch, append.base_offset, append.records) == (3, 11, (RecordAndVersion(_Put("a", 1), 0),))

    loop.events.handle_commit(CommittedBatch(10, 3, (), 10))  # raft's own batch moves nothing
    assert loop.events.take_effects().completed == []
    loop.events.handle_commit(CommittedBatch(11, 3, (_Put("a", 1),), 11))
    assert loop.events.take_effects().completed == [(token, "ok 1")]
    assert loop.stable_view() == {"a": 1}


def test_renounce_reverts_uncommitted_writes_and_fails_them_with_not_controller() -> None:
    loop = _Loop()
    loop.claim(epoch=1, log_end_offset=0)
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
    loop.claim(epoch=1, log_end_offset=0)
    empty = loop.events.write("noop", lambda: ControllerResult((), "read"))
    assert loop.events.take_effects().completed == [(empty, "read")]
    first = loop.put(("a", 1))
    second = loop.events.write("noop", lambda: ControllerResult((), "after"))
    effects = loop.events.take_effects()
    assert effects.completed == []
    loop.events.handle_commit(CommittedBatch(1, 1, (_Put("a", 1),), 1))
    assert loop.events.take_effects().completed == [(first, "ok 1"), (second, "after")]


def test_non_atomic_results_are_split_and_atomic_ones_are_capped() -> None:
    loop = _Loop(max_records_per_batch=2)
    loop.claim(epoch=1, log_end_offset=5)
    loop.put(("a", 1), ("b", 2), ("c", 3), atomic=False)
    # Raft put its LeaderChangeMessage at 5 and a control record after each of our batches.
    assert [(b.base_offset, len(b.records)) for b in loop.raft.log] == [(5, 0), (6, 2), (8, 0), (9, 1), (10, 0)]
    with pytest.raises(ControllerFault, match="atomically commit 3 records"):
        loop.put(("a", 1), ("b", 2), ("c", 3), atomic=True)


def test_all_batches_of_a_write_go_to_raft_in_one_call_and_none_is_released_if_one_cannot_be_applied() -> None:
    # A fence at 100k partitions is eleven batches: raft reserves them in one call and releases
    # them together once all are applied (one hop onto raft's loop each way on a node).
    loop = _Loop(max_records_per_batch=2)
    loop.claim(epoch=1, log_end_offset=0)
    loop.put(("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5), atomic=False)
    assert loop.raft.prepare_calls == 1
    assert [len(b.records) for b in loop.raft.log if b.records] == [2, 2, 1]
    assert loop.state.snapshot() == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}
    written = len(loop.raft.log)
    with pytest.raises(ControllerFault, match="Unable to apply _Put record at offset"):
        loop.put(("f", 1), ("g", 2), ("h", -1), atomic=False)
    # Its first batch was applied, but nothing of the write reached the log.
    assert loop.raft.prepare_calls == 2 and len(loop.raft.log) == written
    assert [len(b.records) for b in loop.raft.prepared if b.records] == [2, 1]


def test_client_errors_fail_only_that_write_and_replay_failures_are_fatal() -> None:
    loop = _Loop()
    loop.claim(epoch=1, log_end_offset=0)

    def refuse() -> ControllerResult[str]:
        raise ControllerApiError(ErrorCode.invalid_request, "no")

    token = loop.events.write("refuse", refuse)
    [failed] = loop.events.take_effects().failed
    assert (failed.token, failed.error.error_code, failed.error.message) == (token, ErrorCode.invalid_request, "no")
    with pytest.raises(ControllerFault, match="Unable to apply _Put record at offset 1 on active controller"):
        loop.put(("a", -1))
    # The batch was reserved but never let go to the log: a record the controller cannot apply
    # is never replicated.
    assert loop.raft.prepared and all(b.records == () for b in loop.raft.log)


def test_an_unexpected_error_while_generating_renounces_and_answers_unknown_server_error() -> None:
    # Kafka's handleEventException: a bug in generation is not a replay failure. The process goes
    # on; the controller renounces (its uncommitted state is reverted, parked writes fail with
    # NOT_CONTROLLER) and the client gets UNKNOWN_SERVER_ERROR. A replay failure stays fatal (above).
    loop = _Loop()
    loop.claim(epoch=1, log_end_offset=0)
    parked = loop.put(("a", 1))
    loop.events.take_effects()

    def broken() -> ControllerResult[str]:
        raise KeyError("a bug")

    token = loop.events.write("createTopics", broken)
    effects = loop.events.take_effects()
    failures = {f.token: f.error for f in effects.failed}
    assert failures[token].error_code == ErrorCode.unknown_server_error
    assert isinstance(failures[token].__cause__, KeyError)
    assert failures[parked].error_code == ErrorCode.not_controller
    assert effects.resign_epoch == 1 and not loop.events.is_active()
    assert [name for name, _ in effects.faults] == ["createTopics"]
    assert loop.events.metadata_error_count == 1
    assert loop.stable_view() == {}  # the parked, uncommitted write was reverted


def test_an_unexpected_error_in_a_periodic_task_renounces() -> None:
    loop = _Loop()
    loop.claim(epoch=1, log_end_offset=0)

    def explode(now_ms: int) -> tuple[ControllerResult[None], bool]:
        raise RuntimeError("a bug")

    loop.events.register_periodic_task(PeriodicTask(name="fenceStaleBrokers", period_ms=10, run=explode))
    loop.events.periodic.activate(0)
    loop.events.run_due_tasks(1_000)
    effects = loop.events.take_effects()
    assert effects.resign_epoch == 1 and [name for name, _ in effects.faults] == ["fenceStaleBrokers"]
    assert loop.events.metadata_error_count == 1


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
    loop.claim(epoch=2, log_end_offset=1)
    loop.put(("b", 2))
    [_, append, _] = loop.raft.log
    assert append.base_offset == 2 and append.epoch == 2
    assert loop.events.active_controller_count() == 1


def test_loading_a_snapshot_replaces_state_and_is_fatal_on_the_active_controller() -> None:
    loop = _Loop()
    loop.events.handle_commit(CommittedBatch(0, 1, (_Put("old", 1),), 0))
    loop.events.handle_load_snapshot(last_contained_offset=99, epoch=4, records=[_Put("new", 2)])
    assert loop.stable_view() == {"new": 2}
    assert loop.events.last_stable_offset() == 99
    loop.claim(epoch=5, log_end_offset=100)
    with pytest.raises(ControllerFault, match="active controller"):
        loop.events.handle_load_snapshot(last_contained_offset=120, epoch=5, records=[])


def test_records_are_applied_where_raft_places_them_between_its_own_control_batches() -> None:
    # The bug this replaced: the controller predicted offsets (last append + 1) and renounced when
    # raft, having written a VotersRecord in between, placed the batch one further on.
    loop = _Loop()
    seen: list[tuple[str, int]] = []
    loop.events._replayers[_Put] = lambda record, offset: (seen.append((record.key, offset)),
                                                           loop.state.put(record.key, record.value))
    loop.claim(epoch=4, log_end_offset=20)  # LeaderChangeMessage at 20
    first = loop.put(("a", 1))  # 21, then raft's control record at 22
    loop.raft.control_batch(4)  # a voter change: VotersRecord at 23
    second = loop.put(("b", 2), ("c", 3))  # 24-25, control record at 26
    assert seen == [("a", 21), ("b", 24), ("c", 25)]
    assert loop.events.offset_control.last_scheduled_offset == 25
    assert loop.events.take_effects().is_empty()  # no renounce, nothing failed
    loop.commit_appends()
    assert loop.events.take_effects().completed == [(first, "ok 1"), (second, "ok 2")]
    assert loop.events.last_stable_offset() == 25  # control batches do not move the controller's offsets
    # Losing leadership now reverts exactly what was not committed, whatever raft wrote around it.
    third = loop.put(("a", 9))
    loop.raft.control_batch(4)
    loop.events.renounce()
    assert [(f.token, f.error.error_code) for f in loop.events.take_effects().failed] == [
        (third, ErrorCode.not_controller)
    ]
    assert loop.state.snapshot() == {"a": 1, "b": 2, "c": 3}


def test_an_append_raft_refuses_fails_the_write_and_renounces() -> None:
    loop = _Loop()
    loop.claim(epoch=2, log_end_offset=0)
    parked = loop.put(("a", 1))
    loop.raft.refuse = True  # raft resigned before the controller heard of it
    refused = loop.put(("b", 2))
    effects = loop.events.take_effects()
    assert [(f.token, f.error.error_code) for f in effects.failed] == [
        (refused, ErrorCode.not_controller), (parked, ErrorCode.not_controller)
    ]
    assert effects.resign_epoch == 2 and not loop.events.is_active()
    assert loop.state.snapshot() == {}
