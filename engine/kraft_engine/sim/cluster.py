"""A simulated KRaft cluster: nodes, their disks, the network, and the reference driver.

`SimCluster._perform` is the reference driver: it performs a raft `Output` exactly in the order
the core's contract demands, and the asyncio node process mirrors it:

1. `persist` - write the quorum-state durably before anything from this Output leaves the node;
2. `flush` - the fsync the core asked for runs in the background for `fsync_ms()` of virtual
   time, overlapping everything below (the leader's sends to its followers included), and
   completes in order; only then is the disk durable below its offset and the core told so
   (`handle_log_flushed`). A crash before that loses the tail; a truncation before that voids it;
3. `messages` - send requests and responses in list order;
4. `events` - hand them to the state machine in order (snapshot loads, commits, leader change);
   then let the state machine snapshot if it wants to;
5. arm the node's poll timer for `next_deadline_ms`.

With `wire_format` on, every message crosses the network as bytes produced by kio's encoder and
is decoded on arrival, so a run also proves every RPC the core builds is valid on the wire.

Node lifecycle: `kill` is a crash (unflushed log data is lost, in-flight messages to and from
the node are lost with its connections); `shutdown` is graceful (the core hands leadership
over first); `start` re-initialises a node from whatever its disk holds; `wipe` re-formats it
with a new directory id.
"""

from __future__ import annotations

import datetime
import io
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.api_versions.v3.response import ApiVersionsResponse, SupportedFeatureKey
from kio.schema.errors import ErrorCode
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32Timedelta, i64

from kraft_engine.errors import SnapshotError
from kraft_engine.raft import (
    BOOTSTRAP_SNAPSHOT_ID,
    KRAFT_VERSION_1,
    Endpoint,
    LeaderState,
    LogFlush,
    NotLeaderError,
    OutboundRequest,
    Output,
    RaftConfig,
    RaftNode,
    ReplicaKey,
    RequestFailure,
    Role,
    VoterNode,
    VoterSet,
)
from kraft_engine.raft.errors import KRaftVersionUpgradeError
from kraft_engine.raft.log import ValidationKind, validate_offset_and_epoch
from kraft_engine.records.control import build_control_batch
from kraft_engine.records.log_batch import parse_batches
from kraft_engine.sim.disk import SimDisk
from kraft_engine.sim.invariants import ElectionRecord, Invariant, NodeView, Violation
from kraft_engine.sim.network import Envelope, LinkRule, Network
from kraft_engine.sim.replicated_counter import ReplicatedCounter, SimStateMachine, decode_value
from kraft_engine.sim.scheduler import EventHandle, Scheduler

__all__ = ["ADMIN_ID", "CLUSTER_ID", "SimCluster", "SimNode", "endpoint_of"]

CLUSTER_ID = "kraftwerk-sim-cluster0"
_BASE_PORT = 19090
# Polls one node may need within one virtual millisecond (cascading transitions, listener
# catch-up in slices); more than this means the core asks to be polled "now" forever.
_MAX_POLLS_PER_MS = 100

ADMIN_ID = -1
"""The network address of the admin client (kafka-metadata-quorum add-controller and friends)."""


def _api_versions_response(kraft_versions: tuple[int, int]) -> ApiVersionsResponse:
    # The node process, not the raft core, answers ApiVersions; the leader only reads the
    # kraft.version range a prospective voter supports.
    low, high = kraft_versions
    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        supported_features=(SupportedFeatureKey(name="kraft.version", min_version=i16(low), max_version=i16(high)),),
    )


def _bootstrap_snapshot(voters: VoterSet) -> bytes:
    """The 0-0 checkpoint `kraft storage format --initial-controllers` writes: kraft.version 1
    and the initial voter set, between a snapshot header and footer."""
    records: list[Any] = [
        SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(0)),
        KRaftVersionRecord(version=i16(0), k_raft_version=i16(KRAFT_VERSION_1)),
        voters.to_record(),
        SnapshotFooterRecord(version=i16(0)),
    ]
    return b"".join(
        build_control_batch(base_offset=offset, partition_leader_epoch=0, timestamp_ms=0, records=[record])
        for offset, record in enumerate(records)
    )


def endpoint_of(node_id: int) -> Endpoint:
    # Never bound: the address only identifies the node inside the simulated network.
    return Endpoint("CONTROLLER", "127.0.0.1", _BASE_PORT + node_id)


def _encode(entity: Any, *, wire_format: bool) -> Any:
    if not wire_format:
        return entity  # kio entities are frozen: sharing one between nodes is safe
    with io.BytesIO() as buffer:
        entity_writer(type(entity))(buffer, entity)
        return buffer.getvalue()


def _decode(entity_type: type, data: Any) -> Any:
    if not isinstance(data, bytes):
        return data
    entity: Any
    entity, size = entity_reader(entity_type)(data, 0)
    if size != len(data):
        raise Violation("WireFormat", f"{entity_type.__name__} decoded {size} of {len(data)} bytes")
    return entity


def _agree(committed: dict[int, tuple[int, int]], offset: int, value: int, node_id: int, where: str) -> None:
    """Record `value` as committed at `offset`, or fail if the cluster committed another one."""
    known = committed.setdefault(offset, (value, node_id))
    if known[0] != value:
        raise Violation(
            "ConsistentCommittedData",
            f"{where} holds {value} at committed offset {offset}; node {known[1]} committed {known[0]}",
        )


@dataclass(frozen=True)
class _Request:
    token: int  # the sender's token, echoed back with the response
    incarnation: int  # the sender's incarnation: a restarted node ignores its past life's replies
    entity_type: type
    data: Any  # the encoded bytes, or the entity itself when the wire round trip is off


@dataclass(frozen=True)
class _Response:
    token: int
    incarnation: int
    entity_type: type | None
    data: Any
    failure: RequestFailure | None = None


@dataclass
class SimNode:
    """One running incarnation of a node: the raft core, its state machine, its timers."""

    node_id: int
    raft: RaftNode
    counter: SimStateMachine
    incarnation: int
    poll_handle: EventHandle | None = None
    poll_at_ms: int | None = None
    # inbound token -> (source node, source token, source incarnation)
    inbound: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    next_inbound_token: int = 1
    shutting_down: bool = False
    last_poll_ms: int = -1
    polls_at_same_ms: int = 0
    # When this incarnation's last requested fsync completes (fsyncs complete in order).
    flush_done_at_ms: int = 0


class SimCluster:
    """The nodes of one run, wired to one scheduler and one network."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        voter_ids: Iterable[int],
        observer_ids: Iterable[int] = (),
        raft_config: RaftConfig | None = None,
        link_rule: LinkRule | None = None,
        invariants: Iterable[Invariant] = (),
        wire_format: bool = True,
        dynamic: bool = False,
        node_configs: dict[int, RaftConfig] | None = None,
        state_machine_factory: Callable[[int], SimStateMachine] = ReplicatedCounter,
    ) -> None:
        self.scheduler = scheduler
        # Builds each incarnation's raft listener from its node id (a fresh one per restart).
        self.state_machine_factory = state_machine_factory
        self.raft_config = raft_config or RaftConfig()
        self.node_configs = dict(node_configs or {})
        self.voter_ids = sorted(voter_ids)
        self.observer_ids = sorted(observer_ids)
        self.network = Network(scheduler, deliver=self._arrive, default_rule=link_rule, lost=self._lost)
        self.disks = {node_id: SimDisk(self._new_directory_id()) for node_id in self.all_ids}
        self.running: dict[int, SimNode] = {}
        # The virtual time a controller generated each record it appended, by (leader epoch,
        # offset): a committed batch carries its batch's start time, up to a linger earlier.
        self.record_written_ms: dict[tuple[int, int], int] = {}
        self._incarnations = dict.fromkeys(self.all_ids, 0)
        # The kraft.version range each node's software supports (what its ApiVersions says).
        self.supported_kraft_versions: dict[int, tuple[int, int]] = dict.fromkeys(self.all_ids, (0, 1))
        self.dynamic = dynamic
        self.static_voters: VoterSet | None = None
        self.bootstrap_servers: tuple[Endpoint, ...] = ()
        if dynamic:
            # kraft.version 1: every initial voter is formatted with the bootstrap snapshot naming
            # the voters by id and directory id; everyone discovers the leader via bootstrap servers.
            initial = VoterSet(
                VoterNode(key=ReplicaKey(i, self.disks[i].directory_id), endpoints=(endpoint_of(i),))
                for i in self.voter_ids
            )
            for node_id in self.voter_ids:
                self.disks[node_id].log.store_snapshot(BOOTSTRAP_SNAPSHOT_ID, _bootstrap_snapshot(initial))
            self.bootstrap_servers = tuple(endpoint_of(i) for i in self.voter_ids)
        else:
            # kraft.version 0: controller.quorum.voters, no directory ids (any directory matches).
            self.static_voters = VoterSet(
                VoterNode(key=ReplicaKey(i, None), endpoints=(endpoint_of(i),)) for i in self.voter_ids
            )
        self.admin_responses: dict[int, Any] = {}
        self._next_admin_token = 1
        self._by_port = {endpoint_of(i).port: i for i in self.all_ids}
        self.invariants = list(invariants)
        if self.invariants:
            scheduler.add_check(self.check_invariants)
        self.lost_offsets = 0  # unflushed offsets lost to crashes, for reports
        # Virtual ms one fsync takes; scenarios draw it per run (0: completes right after the call).
        self.fsync_ms: Callable[[], int] = lambda: 0
        self.wire_format = wire_format
        self._snapshot_checks: dict[int, tuple[object, bool]] = {}
        # Views are rebuilt only for nodes something happened to since the last check: a node's
        # state (and its disk) only changes inside calls the driver makes on it.
        self._views: dict[int, NodeView] = {}
        self._dirty: set[int] = set(self.all_ids)

    # -- topology ------------------------------------------------------------------------------
    @property
    def all_ids(self) -> list[int]:
        return [*self.voter_ids, *self.observer_ids]

    def _new_directory_id(self) -> uuid.UUID:
        return uuid.UUID(int=self.scheduler.random.getrandbits(128))

    def majority(self) -> int:
        return len(self.voter_ids) // 2 + 1

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self, node_id: int) -> SimNode:
        """(Re)start a node from its durable state, as a fresh process would."""
        if node_id in self.running:
            raise ValueError(f"node {node_id} is already running")
        disk = self.disks[node_id]
        self._dirty.add(node_id)
        self._incarnations[node_id] += 1
        now_ms = self.scheduler.now_ms
        raft = RaftNode(
            config=self.node_configs.get(node_id, self.raft_config),
            node_id=node_id,
            directory_id=disk.directory_id,
            cluster_id=CLUSTER_ID,
            log=disk.log,
            persisted=disk.quorum_state,
            static_voters=self.static_voters,
            # One random for the whole run keeps it reproducible from the seed alone.
            rng=self.scheduler.random,
            now_ms=now_ms,
            local_endpoints=(endpoint_of(node_id),),
            bootstrap_servers=self.bootstrap_servers,
            supported_kraft_versions=self.supported_kraft_versions[node_id],
        )
        node = SimNode(node_id, raft, self.state_machine_factory(node_id), self._incarnations[node_id])
        self.running[node_id] = node
        self._perform(node, raft.poll(now_ms))
        return node

    def start_all(self) -> None:
        for node_id in self.all_ids:
            self.start(node_id)

    def kill(self, node_id: int, *, reset_connections: bool = False) -> None:
        """Crash: the process is gone, its connections drop, unflushed log data is lost.

        By default the whole host vanishes: requests the node held (a parked Fetch) are never
        answered and their senders find out only by their own request timeout. With
        `reset_connections` only the process dies and its host's kernel resets its connections,
        so every peer whose request it held hears DISCONNECTED at once (new connections are
        refused either way).
        """
        node = self.running.pop(node_id, None)
        self._dirty.add(node_id)
        if node is None:
            return
        if node.poll_handle is not None:
            node.poll_handle.cancel()
        self.lost_offsets += self.disks[node_id].crash()
        if reset_connections:
            for source, token, incarnation in node.inbound.values():
                self._reset_later(source, _Response(token, incarnation, None, b"", RequestFailure.DISCONNECTED))

    def shutdown(self, node_id: int, *, timeout_ms: int = 5000) -> None:
        """Graceful shutdown: the node stops by itself once the core reports it may."""
        node = self.running[node_id]
        node.shutting_down = True
        self._perform(node, node.raft.shutdown(timeout_ms, now_ms=self.scheduler.now_ms))

    def _reset_later(self, node_id: int, failure: _Response) -> None:
        self.scheduler.call_later(1, lambda: self._receive_response(node_id, failure), label=f"connection reset {node_id}")

    def wipe(self, node_id: int) -> None:
        """Crash and re-format: empty disk and a new directory id."""
        self.kill(node_id)
        self.disks[node_id].wipe(self._new_directory_id())
        self._dirty.add(node_id)
        for invariant in self.invariants:
            forget = getattr(invariant, "forget", None)
            if forget is not None:
                forget(node_id)

    # -- the state machine's writes ------------------------------------------------------------
    def append_on_leader(self, records_per_append: int = 1) -> bool:
        """Like Kafka's SequentialAppendAction: the writable leader appends its next value(s)."""
        for node in list(self.running.values()):
            counter = node.counter
            if not counter.writable or node.shutting_down or counter.claimed_epoch is None:
                continue
            now_ms = self.scheduler.now_ms
            self._dirty.add(node.node_id)
            records = [counter.next_append() for _ in range(records_per_append)]
            try:
                node.raft.append(records, epoch=counter.claimed_epoch, now_ms=now_ms)
            except NotLeaderError:
                counter.append_failed(len(records))
                self._perform(node, node.raft.resign(counter.claimed_epoch, now_ms=now_ms))
                continue
            self._arm_poll(node, node.raft.next_deadline_ms(now_ms))
            return True
        return False

    def drive(self, node: SimNode, call: Callable[[RaftNode, int], Output | None]) -> None:
        """Let a state machine call into its own raft node between the driver's events (a prepared
        append released, a resignation), as a node's controller task does: whatever Output the call
        returns is performed, and the poll is re-armed for the deadline the call may have moved."""
        if self.running.get(node.node_id) is not node:
            return  # that incarnation is gone
        self._dirty.add(node.node_id)
        now_ms = self.scheduler.now_ms
        out = call(node.raft, now_ms)
        if out is not None:
            self._perform(node, out)
        else:
            self._arm_poll(node, node.raft.next_deadline_ms(now_ms))

    def admin_request(self, node_id: int, request: Any) -> int:
        """Send an admin request (AddRaftVoter, RemoveRaftVoter, DescribeQuorum) to `node_id` over
        the network; its response lands in `admin_responses[token]` unless it is lost."""
        token = self._next_admin_token
        self._next_admin_token += 1
        payload = _Request(token, 0, type(request), _encode(request, wire_format=self.wire_format))
        self.network.send(ADMIN_ID, node_id, payload)
        return token

    def upgrade_kraft_version(self, version: int) -> str | None:
        """What `kafka-features upgrade --feature kraft.version=1` makes the controller do: ask
        the current leader to finalize `version`. Returns why it was refused, or None."""
        leader = self.leader()
        if leader is None:
            return "no leader"
        now_ms = self.scheduler.now_ms
        try:
            out = leader.raft.upgrade_kraft_version(leader.raft.epoch, version, validate_only=False, now_ms=now_ms)
        except (NotLeaderError, KRaftVersionUpgradeError) as refusal:
            return str(refusal)
        self._perform(leader, out)
        return None

    # -- the driver ----------------------------------------------------------------------------
    def _perform(self, node: SimNode, out: Output) -> None:
        self._dirty.add(node.node_id)
        if self.running.get(node.node_id) is not node:
            return  # the call that produced this Output crashed the node (never happens today)
        # 1. Durable quorum-state before anything of this Output is revealed.
        if out.persist is not None:
            self.disks[node.node_id].write_quorum_state(out.persist)
        # 2. The fsync the core asked for, in the background (it overlaps the sends below).
        if out.flush is not None:
            self._flush_later(node, out.flush)
        # 3. Messages, in order.
        for message in out.messages:
            if isinstance(message, OutboundRequest):
                self._send_request(node, message)
            else:
                origin = node.inbound.pop(message.token, None)
                if origin is None:
                    raise Violation("Driver", f"node {node.node_id} answered unknown token {message.token}")
                source, source_token, source_incarnation = origin
                response = _Response(
                    source_token, source_incarnation, type(message.response), _encode(message.response, wire_format=self.wire_format)
                )
                self.network.send(node.node_id, source, response)
        # 4. Listener events, in order; then let the state machine snapshot.
        for event in out.events:
            node.counter.handle(event)
        if out.events:
            self._maybe_snapshot(node)
        if out.shutdown_complete and node.shutting_down:
            self.disks[node.node_id].log.flush()  # a graceful stop closes its log (fsync), as the process does
            self.kill(node.node_id)
            return
        # 5. Timers.
        self._arm_poll(node, out.next_deadline_ms)

    def _flush_later(self, node: SimNode, flush: LogFlush) -> None:
        """The disk becomes durable below `flush.end_offset` when the fsync completes, unless the
        node crashed (the tail is lost) or its log was cut meanwhile (the fsync proves nothing
        about what was written after the cut); only a completed fsync is reported to the core."""
        log = self.disks[node.node_id].log
        truncations = log.truncations
        done_at_ms = max(node.flush_done_at_ms, self.scheduler.now_ms + self.fsync_ms())
        node.flush_done_at_ms = done_at_ms

        def done() -> None:
            if self.running.get(node.node_id) is not node or log.truncations != truncations:
                return
            log.flush_to(flush.end_offset)
            self._perform(node, node.raft.handle_log_flushed(flush, now_ms=self.scheduler.now_ms))

        self.scheduler.call_at(done_at_ms, done, label=f"fsync {node.node_id}")

    def _maybe_snapshot(self, node: SimNode) -> None:
        request = node.counter.snapshot_due()
        if request is None:
            return
        try:
            node.raft.create_snapshot(
                end_offset=request.end_offset,
                records=request.records,
                last_contained_log_timestamp_ms=request.last_contained_log_timestamp_ms,
                now_ms=self.scheduler.now_ms,
            )
        except SnapshotError:
            return  # e.g. below the log start after a snapshot download; try again later
        node.counter.snapshot_taken(request.end_offset)

    def _send_request(self, node: SimNode, message: OutboundRequest) -> None:
        destination = message.destination_id
        if destination < 0:  # a bootstrap server: resolve it by address, as a socket would
            destination = next(
                (self._by_port[e.port] for e in message.endpoints if e.port in self._by_port), destination
            )
        payload = _Request(message.token, node.incarnation, type(message.request), _encode(message.request, wire_format=self.wire_format))
        if destination not in self.disks:
            self._fail_later(node, payload, RequestFailure.DISCONNECTED)
            return
        self.network.send(node.node_id, destination, payload)

    def _fail_later(self, node: SimNode, request: _Request, failure: RequestFailure) -> None:
        # Connection refused arrives after a short delay, never synchronously inside the driver.
        response = _Response(request.token, request.incarnation, None, b"", failure)
        self.scheduler.call_later(
            1, lambda: self._receive_response(node.node_id, response), label=f"refused {node.node_id}"
        )

    def _lost(self, envelope: Envelope) -> None:
        """A message lost to a broken connection: the side waiting for a response learns it."""
        payload = envelope.payload
        if isinstance(payload, _Request):
            sender = self.running.get(envelope.source)
            if sender is not None and sender.incarnation == payload.incarnation:
                self._fail_later(sender, payload, RequestFailure.DISCONNECTED)
        elif envelope.destination != ADMIN_ID:
            failure = _Response(payload.token, payload.incarnation, None, b"", RequestFailure.DISCONNECTED)
            self.scheduler.call_later(
                1, lambda: self._receive_response(envelope.destination, failure), label="connection lost"
            )

    def _arrive(self, envelope: Envelope) -> None:
        payload = envelope.payload
        if envelope.destination == ADMIN_ID:
            if isinstance(payload, _Response) and payload.entity_type is not None:
                self.admin_responses[payload.token] = _decode(payload.entity_type, payload.data)
            return
        if isinstance(payload, _Request):
            target = self.running.get(envelope.destination)
            if target is None:
                # Connection refused: the sender learns fast that nobody is listening.
                sender = self.running.get(envelope.source)
                if sender is not None and sender.incarnation == payload.incarnation:
                    self._fail_later(sender, payload, RequestFailure.DISCONNECTED)
                return
            if payload.entity_type is ApiVersionsRequest:
                answer = _api_versions_response(self.supported_kraft_versions[target.node_id])
                response = _Response(
                    payload.token, payload.incarnation, ApiVersionsResponse, _encode(answer, wire_format=self.wire_format)
                )
                self.network.send(target.node_id, envelope.source, response)
                return
            token = target.next_inbound_token
            target.next_inbound_token += 1
            target.inbound[token] = (envelope.source, payload.token, payload.incarnation)
            request = _decode(payload.entity_type, payload.data)
            self._perform(target, target.raft.handle_request(request, token=token, now_ms=self.scheduler.now_ms))
        else:
            self._receive_response(envelope.destination, payload)

    def _receive_response(self, node_id: int, response: _Response) -> None:
        node = self.running.get(node_id)
        if node is None or node.incarnation != response.incarnation:
            return
        body: Any = response.failure
        if response.entity_type is not None:
            body = _decode(response.entity_type, response.data)
        self._perform(node, node.raft.handle_response(response.token, body, now_ms=self.scheduler.now_ms))

    def _arm_poll(self, node: SimNode, deadline_ms: int) -> None:
        handle = node.poll_handle
        if handle is not None and not handle.cancelled and node.poll_at_ms is not None and node.poll_at_ms <= deadline_ms:
            return  # an earlier poll is already armed; it will re-arm
        if node.poll_handle is not None:
            node.poll_handle.cancel()
        node.poll_at_ms = deadline_ms
        node.poll_handle = self.scheduler.call_at(deadline_ms, lambda: self._poll(node), label=f"poll {node.node_id}")

    def _poll(self, node: SimNode) -> None:
        node.poll_handle = None
        node.poll_at_ms = None
        if self.running.get(node.node_id) is not node:
            return
        now_ms = self.scheduler.now_ms
        # A core that keeps asking to be polled "now" without ever moving on would spin a real
        # driver's CPU forever; report it instead of spinning the simulation.
        node.polls_at_same_ms = node.polls_at_same_ms + 1 if node.last_poll_ms == now_ms else 1
        node.last_poll_ms = now_ms
        if node.polls_at_same_ms > _MAX_POLLS_PER_MS:
            raise Violation(
                "NoBusyPoll",
                f"node {node.node_id} ({node.raft.role.value}) asked to be polled again at "
                f"{now_ms} ms {_MAX_POLLS_PER_MS} times in a row",
            )
        self._perform(node, node.raft.poll(now_ms))

    # -- observation ---------------------------------------------------------------------------
    def view(self, node_id: int) -> NodeView:
        disk = self.disks[node_id]
        log = disk.log
        record = disk.quorum_state
        persisted = (
            None
            if record is None
            else ElectionRecord(
                epoch=record.epoch,
                leader_id=record.leader_id,
                voted_id=None if record.voted_key is None else record.voted_key.id,
            )
        )
        snapshots = log.snapshot_ids()
        earliest = snapshots[0] if snapshots else None
        snapshot_valid = True
        if earliest is not None:
            # Validating walks the log; redo it only when the log or its snapshots changed.
            key = (id(log), log.log_start_offset, earliest, log.end_offset(), len(snapshots))
            cached = self._snapshot_checks.get(node_id)
            if cached is not None and cached[0] == key:
                snapshot_valid = cached[1]
            else:
                check = validate_offset_and_epoch(log, offset=earliest.offset, epoch=earliest.epoch)
                snapshot_valid = check.kind is ValidationKind.VALID
                self._snapshot_checks[node_id] = (key, snapshot_valid)
        base = {
            "node_id": node_id,
            "persisted": persisted,
            "log_start_offset": log.log_start_offset,
            "log_end_offset": log.end_offset().offset,
            "earliest_snapshot": None if earliest is None else (earliest.offset, earliest.epoch),
            "earliest_snapshot_valid": snapshot_valid,
        }
        node = self.running.get(node_id)
        if node is None:
            return NodeView(running=False, **base)  # type: ignore[arg-type]
        raft = node.raft
        is_leader = raft.role is Role.LEADER
        hwm = raft.high_watermark
        committed_voter_ids = None
        uncommitted_voter_sets = 0
        if is_leader and hwm is not None and raft.kraft_version >= KRAFT_VERSION_1:
            committed = raft.voter_set_at(hwm - 1)
            committed_voter_ids = committed.ids
            seen = {committed}
            for offset in range(hwm, raft.log_end_offset):
                seen.add(raft.voter_set_at(offset))
            uncommitted_voter_sets = len(seen) - 1
        return NodeView(
            running=True,
            epoch=raft.epoch,
            is_leader=is_leader,
            high_watermark=hwm,
            voter_ids=raft.voters.ids,
            committed_voter_ids=committed_voter_ids,
            uncommitted_voter_sets=uncommitted_voter_sets,
            writable=node.counter.writable,
            snapshot_loads_since_leader_change=node.counter.snapshot_loads_since_leader_change,
            committed=node.counter.applied,
            incarnation=node.incarnation,
            **base,  # type: ignore[arg-type]
        )

    def views(self) -> list[NodeView]:
        for node_id in self._dirty:
            self._views[node_id] = self.view(node_id)
        self._dirty.clear()
        return [self._views[node_id] for node_id in self.all_ids]

    def check_invariants(self) -> None:
        views = self.views()
        for invariant in self.invariants:
            invariant.check(views)

    def validate_committed_logs(self) -> None:
        """End-of-run check (Kafka's ConsistentCommittedData validation) over the disks themselves:
        every running node's log below its high watermark, and every snapshot on any disk, holds
        the values the cluster committed."""
        committed: dict[int, tuple[int, int]] = {}
        for node_id, node in self.running.items():
            for offset, value in node.counter.applied:
                committed.setdefault(offset, (value, node_id))
        for node_id, node in sorted(self.running.items()):
            hwm = node.raft.high_watermark
            if hwm is None:
                continue
            for batch in self.disks[node_id].log.batches():
                if batch.base_offset >= hwm:
                    break
                for delta, data in enumerate(batch.records):
                    offset = batch.base_offset + delta
                    if offset >= hwm:
                        break
                    _agree(committed, offset, decode_value(data), node_id, f"node {node_id}'s log")
        # Snapshots included: every snapshot on every disk (running or not) holds the counter
        # value the cluster committed at its last contained offset.
        for node_id, disk in sorted(self.disks.items()):
            log = disk.log
            for snapshot_id in log.snapshot_ids():
                if snapshot_id == BOOTSTRAP_SNAPSHOT_ID:
                    continue
                size = log.snapshot_size(snapshot_id) or 0
                values = [v for b in parse_batches(log.read_snapshot(snapshot_id, 0, size)) for v in b.records]
                if len(values) != 1:
                    raise Violation("SnapshotContent", f"snapshot {snapshot_id} on node {node_id} holds {len(values)} values")
                where = f"snapshot {snapshot_id} on node {node_id}"
                _agree(committed, snapshot_id.offset - 1, decode_value(values[0]), node_id, where)

    # -- queries for scenarios -----------------------------------------------------------------
    def leader(self) -> SimNode | None:
        """The running leader with the highest epoch, if any."""
        leaders = [n for n in self.running.values() if isinstance(n.raft.state, LeaderState)]
        return max(leaders, key=lambda n: n.raft.epoch, default=None)

    def latest_leader_id(self) -> int | None:
        """The leader the highest-epoch running node knows of (Kafka's `latestLeader`)."""
        best: tuple[int, int | None] = (-1, None)
        for node in self.running.values():
            if node.raft.epoch > best[0] or (node.raft.epoch == best[0] and node.raft.leader_id is not None):
                best = (node.raft.epoch, node.raft.leader_id)
        return best[1]

    def leader_id_is_not(self, node_id: int) -> bool:
        leader = self.leader()
        return leader is not None and leader.node_id != node_id

    def high_watermark(self, node_id: int) -> int:
        node = self.running.get(node_id)
        hwm = None if node is None else node.raft.high_watermark
        return hwm or 0

    def max_high_watermark(self, node_ids: Iterable[int] | None = None) -> int:
        ids = self.running if node_ids is None else [i for i in node_ids if i in self.running]
        return max((self.high_watermark(i) for i in ids), default=0)

    def all_reached(self, offset: int, node_ids: Iterable[int] | None = None) -> bool:
        """Every listed (default: running) node's HWM is above `offset` and its counter applied it."""
        ids = list(self.running) if node_ids is None else list(node_ids)
        return all(i in self.running and self.high_watermark(i) > offset for i in ids)

    def any_reached(self, offset: int) -> bool:
        return any(self.high_watermark(i) > offset for i in self.running)

    def has_consistent_leader(self) -> bool:
        """Every running node's durable quorum-state names the same leader and epoch."""
        states = {self.disks[i].quorum_state for i in self.running}
        leaders = {None if s is None else (s.epoch, s.leader_id) for s in states}
        if len(leaders) != 1:
            return False
        (leader,) = leaders
        return leader is not None and leader[1] is not None

    def on_every(self, period_ms: int, action: Callable[[], Any], *, label: str, jitter_ms: int = 0) -> EventHandle:
        return self.scheduler.every(period_ms, action, label=label, jitter_ms=jitter_ms)
