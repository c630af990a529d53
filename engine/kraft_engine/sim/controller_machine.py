"""The real quorum controller as a simulated node's state machine.

The replicated counter proves the consensus; it cannot prove that the quorum controller gets
along with it. This state machine runs Kafka's controller discipline for real — a
`QuorumController` per node, fed raft's listener events, writing through the raft append port
(raft reserves the offsets, the controller replays there, raft writes) — under the simulation's
faults, voter changes included.

As on a real node (`server.controller_service`), the controller is its own task: raft events
are queued and the controller handles them, client writes and its periodic tasks in a later
scheduler event, never inside the driver's `_perform`. Its renounces are checked as they happen:
`ControllerRenounce` fails the run when the controller gives up an epoch its raft node still
leads (and is not shutting down). A leadership change explains every legitimate renounce — a
later epoch elected, raft resigned, or raft refusing an append because it already moved on — so
anything else (such as an offset the controller expected and raft did not give) is a bug that
turns a harmless event into a failover.
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from kraft_engine.controller import (
    AppendRefused,
    ControllerApiError,
    QuorumController,
    RecordAndVersion,
    encode_records,
)
from kraft_engine.errors import RaftError
from kraft_engine.metadata import VersionRange
from kraft_engine.raft import (
    BOOTSTRAP_SNAPSHOT_ID,
    CommittedBatch,
    LeaderChange,
    ListenerEvent,
    NotLeaderError,
    Role,
    SnapshotLoad,
)
from kraft_engine.records import (
    FeatureLevelRecord,
    decode_metadata_record,
    decode_metadata_records,
)
from kraft_engine.sim.cluster import CLUSTER_ID
from kraft_engine.sim.invariants import Violation
from kraft_engine.sim.replicated_counter import SnapshotRequest
from kraft_engine.sim.scheduler import EventHandle

if TYPE_CHECKING:
    from kraft_engine.sim.cluster import SimCluster, SimNode

__all__ = ["ELR_FEATURE", "METADATA_VERSION", "ControllerMachine", "ControllerWrite", "SimRaftAppends"]

METADATA_VERSION = 25
"""The bootstrap metadata.version of simulated controllers (4.0-IV3)."""
ELR_FEATURE = "eligible.leader.replicas.version"


class SimRaftAppends:
    """The controller's raft append port on a simulated node's raft core."""

    def __init__(self, machine: ControllerMachine) -> None:
        self._machine = machine

    def next_append_offset(self) -> int:
        return self._machine.node().raft.next_append_offset

    def prepare_appends(self, *, epoch: int, batches: Sequence[Sequence[RecordAndVersion]]) -> list[int]:
        node = self._machine.node()
        if epoch not in self._machine.led_epochs:
            raise Violation(
                "ControllerWrite",
                f"controller {self._machine.node_id} wrote in epoch {epoch}, which its raft node never led",
            )
        values = [encode_records(records) for records in batches]
        now_ms = self._machine.now_ms()
        try:
            last_offsets = node.raft.prepare_appends(values, epoch=epoch, now_ms=now_ms)
        except (NotLeaderError, RaftError) as error:
            raise AppendRefused(str(error)) from error
        written = self._machine.cluster.record_written_ms
        for encoded, last_offset in zip(values, last_offsets, strict=True):
            for offset in range(last_offset - len(encoded) + 1, last_offset + 1):
                written[epoch, offset] = now_ms
        return last_offsets

    def schedule_prepared_append(self) -> None:
        self._machine.cluster.drive(self._machine.node(), lambda raft, _: raft.schedule_prepared_append())


@dataclass
class ControllerWrite:
    """One client write sent to a controller, and what became of it."""

    name: str
    sent_ms: int
    node_id: int
    epoch: int
    outcome: str | None = None  # "ok", or the error code's name
    response: object = None  # the completion's value once "ok"


@dataclass
class _Renounce:
    at_ms: int
    epoch: int


@dataclass
class ControllerMachine:
    """A `SimStateMachine` backed by a real `QuorumController`; see the module docstring."""

    cluster: SimCluster
    node_id: int
    claimed_epoch: int | None = None  # never set: the driver's counter appends do not apply here
    snapshot_loads_since_leader_change: int = 0
    # (offset, CRC of the record's bytes) for every committed record: ConsistentCommittedData.
    applied: list[tuple[int, int]] = field(default_factory=list)
    writes: list[ControllerWrite] = field(default_factory=list)
    renounces: list[_Renounce] = field(default_factory=list)
    _queue: deque[Callable[[], None]] = field(default_factory=deque)
    _pending: dict[int, ControllerWrite] = field(default_factory=dict)
    _wakeup: EventHandle | None = None
    _wakeup_ms: int = 0
    _voter_ids: frozenset[int] = frozenset()
    #: Epochs this incarnation's raft node was seen leading (at listener deliveries): the only
    #: epochs its controller may activate in or write to (ControllerActivation, ControllerWrite).
    led_epochs: set[int] = field(default_factory=set)
    #: Leader changes naming this node in an epoch its raft did not hold (a Resigned restart).
    declined_activations: int = 0
    #: Called with every committed batch once the controller applied it (scenario invariants).
    on_commit: Callable[[ControllerMachine, CommittedBatch[bytes]], None] | None = None
    #: Finalize eligible.leader.replicas.version 1 at bootstrap (KIP-966's ELR in every partition change).
    elr: bool = False
    #: When the controller last activated (virtual ms), and in which epoch.
    activated_ms: int = -1
    activated_epoch: int = -1

    def __post_init__(self) -> None:
        self.controller = QuorumController(
            node_id=self.node_id,
            raft=SimRaftAppends(self),
            quorum_node_ids=sorted(self.cluster.voter_ids),
            bootstrap_records=[
                RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=METADATA_VERSION), 0),
                *([RecordAndVersion(FeatureLevelRecord(name=ELR_FEATURE, feature_level=1), 0)] if self.elr else []),
            ],
            local_supported_features={"metadata.version": VersionRange(7, METADATA_VERSION),
                                      ELR_FEATURE: VersionRange(0, 1)},
            cluster_id=CLUSTER_ID,
            rng=self.cluster.scheduler.random,
        )
        self._voter_ids = frozenset(self.cluster.voter_ids)

    # -- where it runs -------------------------------------------------------------------------
    def node(self) -> SimNode:
        node = self.cluster.running.get(self.node_id)
        if node is None or node.counter is not self:
            raise Violation("Driver", f"controller {self.node_id} ran after its process was gone")
        return node

    def _alive(self) -> bool:
        node = self.cluster.running.get(self.node_id)
        return node is not None and node.counter is self

    def now_ms(self) -> int:
        return self.cluster.scheduler.now_ms

    # -- SimStateMachine -----------------------------------------------------------------------
    @property
    def writable(self) -> bool:
        return self.controller.is_active()

    def handle(self, event: ListenerEvent) -> None:
        """Queue a raft listener event for the controller's own task, as the node's shell does.
        Whether raft holds a leader change's epoch is read now, in raft order (a node restarted
        Resigned in its old epoch is named leader but does not hold it)."""
        raft = self.node().raft
        if raft.role is Role.LEADER:
            self.led_epochs.add(raft.epoch)
        raft_is_leader = False
        if isinstance(event, LeaderChange):
            raft_is_leader = raft.role is Role.LEADER and raft.epoch == event.leader.epoch
        self._submit(lambda: self._apply(event, raft_is_leader=raft_is_leader))

    def next_append(self) -> bytes:
        raise Violation("Driver", "the controller machine writes through its controller, not the counter appends")

    def append_failed(self, count: int = 1) -> None:
        return None

    def snapshot_due(self) -> SnapshotRequest | None:
        return None  # the controller machine keeps its whole log

    def snapshot_taken(self, end_offset: int) -> None:
        return None

    # -- client writes -------------------------------------------------------------------------
    def write(self, name: str, operation: Callable[[QuorumController], int]) -> ControllerWrite:
        """Send a client write to this controller (it runs on the controller's task, later)."""
        write = ControllerWrite(name, self.now_ms(), self.node_id, self.controller.events.cur_claim_epoch)
        self.writes.append(write)

        def run() -> None:
            try:
                token = operation(self.controller)
            except ControllerApiError as error:
                write.outcome = error.error_code.name
                return
            self._pending[token] = write

        self._submit(run)
        return write

    # -- the controller's task -----------------------------------------------------------------
    def _submit(self, action: Callable[[], None]) -> None:
        self._queue.append(action)
        self._wake_at(self.now_ms())

    def _wake_at(self, deadline_ms: int) -> None:
        handle = self._wakeup
        if handle is not None and not handle.cancelled:
            if self._wakeup_ms <= deadline_ms:
                return
            handle.cancel()
        self._wakeup_ms = deadline_ms
        self._wakeup = self.cluster.scheduler.call_at(deadline_ms, self._run, label=f"controller {self.node_id}")

    def _run(self) -> None:
        self._wakeup = None
        if not self._alive():
            return
        node = self.node()
        self.controller.tick(self.now_ms())
        self._perform_effects(node)
        while self._queue:
            self._queue.popleft()()
            self._perform_effects(node)
        deadline = self.controller.next_deadline_ms()
        if deadline is not None:
            self._wake_at(max(deadline, self.now_ms()))

    def _apply(self, event: ListenerEvent, *, raft_is_leader: bool) -> None:
        controller = self.controller
        if isinstance(event, CommittedBatch):
            # A fence's changes come back as runs inside a RecordParts, which reads as that tuple.
            records = cast("tuple[object, ...]", decode_metadata_records(event.records))
            controller.handle_commit(event.with_records(records))
            for delta, value in enumerate(event.records):
                self.applied.append((event.base_offset + delta, zlib.crc32(value)))
            if self.on_commit is not None:
                self.on_commit(self, event)
        elif isinstance(event, SnapshotLoad):
            if event.snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
                return  # the bootstrap records seeded the controller; never loaded as state
            loaded = [decode_metadata_record(value)[0] for batch in event.batches for value in batch.records]
            controller.handle_load_snapshot(last_contained_offset=event.snapshot_id.offset - 1,
                                            epoch=event.snapshot_id.epoch, records=loaded)
            self.snapshot_loads_since_leader_change += 1
        elif isinstance(event, LeaderChange):
            leader = event.leader
            was_active = controller.is_active()
            if leader.leader_id == self.node_id and not raft_is_leader:
                self.declined_activations += 1
            controller.handle_leader_change(leader_id=leader.leader_id, epoch=leader.epoch, now_ms=self.now_ms(),
                                            raft_is_leader=raft_is_leader)
            if controller.is_active() and not was_active:
                epoch = controller.events.cur_claim_epoch
                if epoch not in self.led_epochs:
                    raise Violation(
                        "ControllerActivation",
                        f"controller {self.node_id} activated in epoch {epoch}, which its raft node never led "
                        f"(led {sorted(self.led_epochs)}; role now {self.node().raft.role.value})",
                    )
                self.activated_ms, self.activated_epoch = self.now_ms(), epoch
            self.snapshot_loads_since_leader_change = 0
        voters = self.node().raft.committed_voters.ids
        if voters != self._voter_ids:
            self._voter_ids = frozenset(voters)
            controller.set_quorum_node_ids(voters)

    def _perform_effects(self, node: SimNode) -> None:
        effects = self.controller.take_effects()
        for token, response in effects.completed:
            write = self._pending.pop(token, None)
            if write is not None:
                write.outcome = "ok"
                write.response = response
        for failed in effects.failed:
            write = self._pending.pop(failed.token, None)
            if write is not None:
                write.outcome = failed.error.error_code.name
        epoch = effects.resign_epoch
        if epoch is None:
            return
        raft = node.raft
        if raft.role is Role.LEADER and raft.epoch == epoch and not node.shutting_down:
            raise Violation(
                "ControllerRenounce",
                f"controller {self.node_id} renounced epoch {epoch} while its raft node still leads it",
            )
        self.renounces.append(_Renounce(self.now_ms(), epoch))
        self.cluster.drive(node, lambda raft, now_ms: raft.resign(epoch, now_ms=now_ms))
