"""The controller's write → apply → commit discipline, independent of any particular manager.

Kafka's QuorumController runs every operation on one event thread: a write event generates
records, reserves their offsets in the raft layer (bound to the claim epoch; all of a write's
batches in one call), applies ("replays") them to memory at exactly those offsets, lets raft
write them, and parks its completion in a purgatory keyed on the last offset raft gave, until the
stable offset reaches it. Raft alone assigns offsets (its own control records take some too); the
controller never predicts one. Commits advance the offsets and release the purgatory; standbys
replay what the leader wrote. Losing leadership fails the purgatory with NOT_CONTROLLER and
reverts memory to the stable offset.

`EventHandling` is that loop without the thread: the shell calls one method per event, in the
order its single asyncio task dequeues them, and collects the resulting effects. The quorum
controller builds on it by registering each manager's replay methods per record type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kraft_engine.controller.offset_control import OffsetControlManager
from kraft_engine.controller.periodic_tasks import PeriodicTask, PeriodicTaskControl
from kraft_engine.controller.purgatory import Purgatory
from kraft_engine.controller.raft_port import AppendRefused, RaftAppendPort
from kraft_engine.controller.results import (
    MAX_RECORDS_PER_BATCH,
    ControllerApiError,
    ControllerEffects,
    ControllerResult,
    FailedWrite,
    RecordAndVersion,
    RecordList,
    VersionedRun,
)
from kraft_engine.controller.timeline import SnapshotRegistry
from kraft_engine.errors import ControllerError
from kraft_engine.invariant import InvariantViolation, require
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import PartitionChangeRun, RecordParts

__all__ = ["ControllerFault", "EventHandling", "ReplayFunction"]

R = TypeVar("R")

ReplayFunction = Callable[[Any, int], None]
"""Applies one record of a given type at its offset."""


class ControllerFault(ControllerError, RuntimeError):
    """A fatal controller fault (Kafka's fatalFaultHandler): the process must not go on."""


def _not_controller() -> ControllerApiError:
    return ControllerApiError(ErrorCode.not_controller, "This node is not the active controller.")


class EventHandling:
    def __init__(self, *, node_id: int, raft: RaftAppendPort, max_records_per_batch: int = MAX_RECORDS_PER_BATCH) -> None:
        self.node_id = node_id
        self._raft = raft
        self.max_records_per_batch = max_records_per_batch
        self.snapshot_registry = SnapshotRegistry()
        self.offset_control = OffsetControlManager(self.snapshot_registry)
        self.periodic = PeriodicTaskControl()
        self._purgatory: Purgatory[object] = Purgatory()
        self._replayers: dict[type, ReplayFunction] = {}
        self._run_replayers: dict[type, Callable[[Sequence[Any], int], None]] = {}
        self._change_run_replayer: Callable[[PartitionChangeRun, int], None] | None = None
        self._deactivators: list[Callable[[], None]] = []
        self._effects = ControllerEffects()
        self._next_token = 0
        self.cur_claim_epoch = -1
        self.leader_id: int | None = None
        self.leader_epoch = -1
        self.new_active_controllers_count = 0
        self.log_replayed_any_record = False
        # Metrics state (Kafka's QuorumControllerMetrics / ControllerMetadataMetrics).
        self.metadata_error_count = 0
        self.last_applied_offset = -1
        self.last_applied_timestamp_ms = -1
        self.clock_ms = 0
        """The latest time the shell told the controller (ticks, heartbeats, leader changes):
        the append time of the active controller's own batches."""

    # -- wiring ----------------------------------------------------------------------------

    @property
    def raft_port(self) -> RaftAppendPort:
        return self._raft

    def register_replayer(self, record_type: type, replay: ReplayFunction) -> None:
        require(record_type not in self._replayers, f"two replayers for {record_type.__name__}")
        self._replayers[record_type] = replay

    def register_run_replayer(self, record_type: type, replay_run: Callable[[Sequence[Any], int], None]) -> None:
        """`replay_run(records, base_offset)` replays a run of consecutive records of `record_type`
        as the record replayer would one by one, all or nothing (it raises before changing
        anything). A run it refuses is replayed one record at a time, so the failure names its
        record and offset as ever."""
        require(record_type in self._replayers, f"a run replayer for {record_type.__name__} needs its replayer")
        self._run_replayers[record_type] = replay_run

    def register_change_run_replayer(self, replay_run: Callable[[PartitionChangeRun, int], None]) -> None:
        """`replay_run(run, base_offset)` replays a `PartitionChangeRun` (a fan-out's records as
        columns) as the PartitionChangeRecord replayer would record by record, all or nothing. A
        run it refuses is replayed one record at a time."""
        require(self._change_run_replayer is None, "two replayers for partition change runs")
        self._change_run_replayer = replay_run

    def register_periodic_task(self, task: PeriodicTask) -> None:
        self.periodic.register(task)

    def register_deactivator(self, deactivate: Callable[[], None]) -> None:
        """Called whenever this controller renounces (e.g. the cluster manager's heartbeat state)."""
        self._deactivators.append(deactivate)

    # -- effects ---------------------------------------------------------------------------

    def take_effects(self) -> ControllerEffects:
        """Hand the accumulated effects to the shell (and forget them)."""
        effects, self._effects = self._effects, ControllerEffects()
        return effects

    # -- state -----------------------------------------------------------------------------

    def is_active(self) -> bool:
        return self.cur_claim_epoch != -1

    def active_controller_count(self) -> int:
        """Kafka's ActiveControllerCount metric: 1 on the active controller, 0 elsewhere."""
        return 1 if self.is_active() else 0

    def last_stable_offset(self) -> int:
        return self.offset_control.last_stable_offset

    def next_write_offset(self) -> int:
        """Where raft would place the next batch (only meaningful on the active controller)."""
        return self._raft.next_append_offset()

    # -- replay ----------------------------------------------------------------------------

    def replay(self, record: object, offset: int) -> None:
        replay = self._replayers.get(type(record))
        if replay is None:
            # An unknown record type is never skipped: every node must apply the same log.
            raise ControllerFault(f"Unhandled record type {type(record).__name__} at offset {offset}")
        replay(record, offset)
        self.log_replayed_any_record = True

    def _replay_records(self, records: Sequence[object], base_offset: int,
                        fault: Callable[[object, int, Exception], Exception],
                        *, raised_as_is: tuple[type[Exception], ...] = ()) -> None:
        """Replay `records` from `base_offset` on, runs of one type through its run replayer.
        `fault(record, offset, error)` gives the exception a failed record raises, unless the
        error is one of `raised_as_is`."""
        run_replayers = self._run_replayers
        count = len(records)
        index = 0
        while index < count:
            record = records[index]
            kind = type(record)
            replay_run = run_replayers.get(kind)
            if replay_run is not None:
                end = index + 1
                while end < count and type(records[end]) is kind:
                    end += 1
                if end - index > 1:
                    try:
                        replay_run(records[index:end], base_offset + index)
                    except Exception:  # nothing was applied: replayed one by one below, to name the record
                        pass
                    else:
                        self.log_replayed_any_record = True
                        index = end
                        continue
            try:
                self.replay(record, base_offset + index)
            except Exception as error:
                self.metadata_error_count += 1
                if isinstance(error, raised_as_is):
                    raise
                raise fault(record, base_offset + index, error) from error
            index += 1

    def _replay_change_run(self, run: PartitionChangeRun, base_offset: int,
                           fault: Callable[[object, int, Exception], Exception],
                           *, raised_as_is: tuple[type[Exception], ...] = ()) -> None:
        """A fan-out's run through its run replayer, or record by record where it refuses."""
        replay_run = self._change_run_replayer
        if replay_run is not None and len(run) > 1:
            try:
                replay_run(run, base_offset)
            except Exception:  # nothing was applied: replayed one by one below, to name the record
                pass
            else:
                self.log_replayed_any_record = True
                return
        self._replay_records(list(run), base_offset, fault, raised_as_is=raised_as_is)

    # -- writes and reads ------------------------------------------------------------------

    def _new_token(self) -> int:
        self._next_token += 1
        return self._next_token

    def write(self, name: str, operation: Callable[[], ControllerResult[R]]) -> int:
        """Run a write operation; return the token its completion (or failure) will carry."""
        token = self._new_token()
        if not self.is_active():
            self._effects.failed.append(FailedWrite(token, _not_controller()))
            return token
        try:
            result = operation()
        except ControllerApiError as error:
            self._effects.failed.append(FailedWrite(token, error))
            return token
        except ControllerFault:
            raise
        except Exception as error:
            self._generation_fault(name, error, token=token)
            return token
        try:
            self._complete_or_park(token, result)
        except AppendRefused:
            # Raft lost the leadership before the controller heard: this write fails like every
            # one parked before it, and whatever of it was applied is reverted.
            self._effects.failed.append(FailedWrite(token, _not_controller()))
            self.renounce()
        return token

    def _generation_fault(self, name: str, error: Exception, *, token: int | None) -> None:
        """Kafka's handleEventException for a fault while generating records: nothing was applied
        yet, so the controller is not broken, only its view may be. It renounces (the next active
        controller starts from the committed log), the write gets UNKNOWN_SERVER_ERROR, and
        MetadataErrorCount counts it. Only a replay failure is fatal (ControllerFault)."""
        self.metadata_error_count += 1
        self._effects.faults.append((name, error))
        if token is not None:
            api_error = ControllerApiError(ErrorCode.unknown_server_error, f"{name} failed: {error!r}")
            api_error.__cause__ = error
            self._effects.failed.append(FailedWrite(token, api_error))
        if self.is_active():
            self.renounce()

    def _complete_or_park(self, token: int, result: ControllerResult[R]) -> None:
        if not result.records:
            # A write that wrote nothing is a read of the latest (maybe uncommitted) state: it
            # may only complete once every write before it has.
            pending = self._purgatory.highest_pending_offset()
            if pending is None:
                self._effects.completed.append((token, result.response))
            else:
                self._purgatory.add(offset=pending, token=token, response=result.response)
            return
        offset = self.append_records(result)
        self._purgatory.add(offset=offset, token=token, response=result.response)

    def append_records(self, result: ControllerResult[Any]) -> int:
        """Append and apply `result`'s records; return the offset raft gave the last one.
        Raises AppendRefused (the caller renounces)."""
        records: Sequence[RecordAndVersion] = (
            result.records.frozen() if isinstance(result.records, RecordList) else list(result.records)
        )
        if result.is_atomic:
            if len(records) > self.max_records_per_batch:
                raise ControllerFault(
                    f"Attempted to atomically commit {len(records)} records, but maxRecordsPerBatch "
                    f"is {self.max_records_per_batch}"
                )
            return self._append_batches([records])
        # Each batch gets its own in-memory snapshot, so any prefix can be reverted.
        size = self.max_records_per_batch
        return self._append_batches([records[start : start + size] for start in range(0, len(records), size)])

    def _append_batches(self, batches: list[Sequence[RecordAndVersion]]) -> int:
        """Reserve all of one write's batches in one call, apply each where raft placed it, then
        let them all go; the last offset."""
        # Raft says where the batches land (its own control records take offsets too)...
        last_offsets = self._raft.prepare_appends(epoch=self.cur_claim_epoch, batches=batches)
        require(len(last_offsets) == len(batches), f"raft placed {len(last_offsets)} of {len(batches)} batches")
        # ...the records are applied there before raft may write them: a record the controller
        # itself cannot apply is a bug that must be found before the record is replicated (the
        # prepared batches are then never scheduled).
        for records, last_offset in zip(batches, last_offsets, strict=True):
            self._apply_prepared(records, last_offset)
        self._raft.schedule_prepared_append()
        last_offset = last_offsets[-1]
        self.last_applied_offset = last_offset
        self.last_applied_timestamp_ms = self.clock_ms
        return last_offset

    def _apply_prepared(self, records: Sequence[RecordAndVersion], last_offset: int) -> None:
        base_offset = last_offset - len(records) + 1
        require(
            base_offset > self.offset_control.last_scheduled_offset,
            f"raft placed a batch at {base_offset}, at or before the last one scheduled "
            f"({self.offset_control.last_scheduled_offset})",
        )

        def fault(record: object, offset: int, error: Exception) -> Exception:
            return ControllerFault(
                f"Unable to apply {type(record).__name__} record at offset {offset} "
                f"on active controller, from the batch with baseOffset {base_offset}: {error}"
            )

        if isinstance(records, RecordParts):
            offset = base_offset
            for part in records.parts:
                if isinstance(part, VersionedRun):
                    self._replay_change_run(part.run, offset, fault)
                else:
                    self._replay_records([record for record, _ in part], offset, fault)
                offset += len(part)
        else:
            self._replay_records([record for record, _ in records], base_offset, fault)
        self.offset_control.handle_schedule_append(last_offset)

    def read(self, operation: Callable[[int], R]) -> R:
        """Run a read against the stable state: `operation` gets the offset to read at."""
        return operation(self.offset_control.last_stable_offset)

    # -- raft listener ---------------------------------------------------------------------

    def handle_commit(self, batch: CommittedBatch[object]) -> None:
        """A batch became committed. The raft layer delivers every batch exactly once, in order."""
        if not batch.records:
            # Control batches carry no metadata; they do not move the controller's offsets.
            return
        if self.is_active() and batch.epoch == self.cur_claim_epoch:
            # Our own write: it was applied when it was generated.
            self.offset_control.handle_commit_batch(last_offset=batch.last_offset, epoch=batch.epoch)
            for token, response in self._purgatory.complete_up_to(self.offset_control.last_stable_offset):
                self._effects.completed.append((token, response))
            return
        require(
            not self.is_active(),
            f"the active controller at epoch {self.cur_claim_epoch} got a commit from epoch {batch.epoch}",
        )
        def fault(record: object, offset: int, error: Exception) -> Exception:
            return ControllerFault(
                f"Unable to apply {type(record).__name__} record at offset {offset} "
                f"on standby controller, from the batch with baseOffset {batch.base_offset}: {error}"
            )

        records: Sequence[object] = batch.records
        if isinstance(records, RecordParts):
            # Decoded with its fan-outs kept as runs (`decode_metadata_records`).
            offset = batch.base_offset
            for part in records.parts:
                if isinstance(part, PartitionChangeRun):
                    self._replay_change_run(part, offset, fault, raised_as_is=(InvariantViolation, ControllerFault))
                else:
                    self._replay_records(part, offset, fault, raised_as_is=(InvariantViolation, ControllerFault))
                offset += len(part)
        else:
            self._replay_records(records, batch.base_offset, fault, raised_as_is=(InvariantViolation, ControllerFault))
        self.offset_control.handle_commit_batch(last_offset=batch.last_offset, epoch=batch.epoch)
        self.last_applied_offset = batch.last_offset
        self.last_applied_timestamp_ms = batch.append_timestamp_ms

    def handle_load_snapshot(self, *, last_contained_offset: int, epoch: int, records: Sequence[object]) -> None:
        if self.is_active():
            raise ControllerFault(
                f"Asked to load snapshot at offset {last_contained_offset}, but we are the active "
                f"controller at epoch {self.cur_claim_epoch}"
            )
        self.offset_control.begin_load_snapshot()
        for record in records:
            self.replay(record, last_contained_offset)
        self.offset_control.end_load_snapshot(last_contained_offset=last_contained_offset, epoch=epoch)
        self.last_applied_offset = last_contained_offset

    def claim(self, *, epoch: int) -> None:
        require(not self.is_active(), "Cannot claim leadership because we are already the active controller.")
        self.cur_claim_epoch = epoch
        self.new_active_controllers_count += 1
        self.offset_control.activate()

    def renounce(self) -> None:
        """Stop being the active controller: fail everything parked, revert uncommitted state."""
        require(self.is_active(), "Cannot renounce leadership because we are not the current leader.")
        self._effects.resign_epoch = self.cur_claim_epoch
        self.cur_claim_epoch = -1
        for token in self._purgatory.fail_all():
            self._effects.failed.append(FailedWrite(token, _not_controller()))
        self.offset_control.deactivate()
        self.periodic.deactivate()
        for deactivate in self._deactivators:
            deactivate()
        # The reverted suffix was never applied as far as anyone can observe.
        self.last_applied_offset = self.offset_control.last_committed_offset

    # -- periodic tasks --------------------------------------------------------------------

    def next_deadline_ms(self) -> int | None:
        return self.periodic.next_deadline_ms() if self.is_active() else None

    def run_due_tasks(self, now_ms: int) -> None:
        if not self.is_active():
            return
        for task in self.periodic.due(now_ms):
            try:
                result, again = task.run(now_ms)
            except ControllerFault:
                raise
            except Exception as error:
                self._generation_fault(task.name, error, token=None)
                return
            if result.records:
                try:
                    self.append_records(result)
                except AppendRefused:
                    self.renounce()
                    return
            self.periodic.reschedule(task, now_ms=now_ms, immediately=again)
