"""A hand-driven cluster of RaftNodes for the raft unit tests (etcd-style small scenarios).

Messages really go through kio's encoder and decoder, so a test also proves every RPC the node
builds is valid on the wire. Nothing here is random unless a test asks: delivery is FIFO and time
only moves when a test calls `advance`.
"""

from __future__ import annotations

import datetime
import io
import random
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_reader, entity_writer

from kraft_engine.raft import (
    CommittedBatch,
    ElectionState,
    Endpoint,
    LeaderChange,
    LogFlush,
    MemoryLog,
    OutboundRequest,
    Output,
    RaftConfig,
    RaftNode,
    ReplicaKey,
    RequestFailure,
    SnapshotLoad,
    VoterNode,
    VoterSet,
)

CLUSTER_ID = "kraftwerk-test-cluster"
CLIENT = -1000


def api_versions_response(kraft: tuple[int, int]) -> Any:
    from kio.schema.api_versions.v3.response import ApiVersionsResponse, SupportedFeatureKey
    from kio.schema.errors import ErrorCode
    from kio.static.primitive import i16, i32Timedelta

    return ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(),
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        supported_features=(SupportedFeatureKey(name="kraft.version", min_version=i16(kraft[0]), max_version=i16(kraft[1])),),
    )


def bootstrap_log(voters: VoterSet) -> MemoryLog:
    """A log formatted for a dynamic quorum: the 0-0 bootstrap snapshot with kraft.version 1."""
    from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
    from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
    from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
    from kio.static.primitive import i16, i64

    from kraft_engine.raft import BOOTSTRAP_SNAPSHOT_ID
    from kraft_engine.records.control import build_control_batch

    chunks = [
        build_control_batch(base_offset=0, partition_leader_epoch=0, timestamp_ms=0,
                            records=[SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(0))]),
        build_control_batch(base_offset=1, partition_leader_epoch=0, timestamp_ms=0,
                            records=[KRaftVersionRecord(version=i16(0), k_raft_version=i16(1))]),
        build_control_batch(base_offset=2, partition_leader_epoch=0, timestamp_ms=0, records=[voters.to_record()]),
        build_control_batch(base_offset=3, partition_leader_epoch=0, timestamp_ms=0,
                            records=[SnapshotFooterRecord(version=i16(0))]),
    ]
    log = MemoryLog()
    log.store_snapshot(BOOTSTRAP_SNAPSHOT_ID, b"".join(chunks))
    return log


def wire(entity: Any) -> Any:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    data = buffer.getvalue()
    decoded, size = entity_reader(type(entity))(data, 0)
    assert size == len(data)
    return decoded


def directory(node_id: int) -> uuid.UUID:
    return uuid.UUID(int=(node_id + 1) << 64 | 0xABC)


def endpoint(node_id: int) -> Endpoint:
    return Endpoint("CONTROLLER", "127.0.0.1", 19000 + node_id)


def voter_set(ids: list[int], *, with_directories: bool = True) -> VoterSet:
    """A kraft.version 1 voter set (directory ids, versions 0-1), or a static one like
    controller.quorum.voters gives (no directory ids, version 0 only)."""
    return VoterSet(
        VoterNode(
            key=ReplicaKey(i, directory(i) if with_directories else None),
            endpoints=(endpoint(i),),
            min_kraft_version=0,
            max_kraft_version=1 if with_directories else 0,
        )
        for i in ids
    )


@dataclass
class Envelope:
    source: int
    destination: int
    is_request: bool
    token: int
    payload: Any


@dataclass
class NodeRecord:
    node: RaftNode
    log: MemoryLog
    persisted: ElectionState | None = None
    persist_history: list[ElectionState] = field(default_factory=list)
    events: list[Any] = field(default_factory=list)
    alive: bool = True

    @property
    def committed(self) -> list[CommittedBatch]:
        return [e for e in self.events if isinstance(e, CommittedBatch)]

    @property
    def committed_values(self) -> list[bytes]:
        return [v for batch in self.committed for v in batch.records]

    @property
    def leader_changes(self) -> list[LeaderChange]:
        return [e for e in self.events if isinstance(e, LeaderChange)]

    @property
    def snapshot_loads(self) -> list[SnapshotLoad]:
        return [e for e in self.events if isinstance(e, SnapshotLoad)]


class Cluster:
    def __init__(
        self,
        voters: list[int],
        *,
        observers: list[int] = (),  # type: ignore[assignment]
        config: RaftConfig | None = None,
        seed: int = 0,
        static: bool = True,
        start_ms: int = 1_000_000,
    ) -> None:
        self.config = config or RaftConfig()
        self.now_ms = start_ms
        self.seed = seed
        self.voter_ids = list(voters)
        self.static_voters = voter_set(voters, with_directories=False) if static else None
        self.records: dict[int, NodeRecord] = {}
        self.queue: list[Envelope] = []
        self.inbound: dict[tuple[int, int], tuple[int, int]] = {}
        self._next_inbound = 1
        self.drop: Callable[[Envelope], bool] = lambda _: False
        self.sent: list[Envelope] = []
        self.client_responses: dict[int, Any] = {}
        self.supported_kraft: dict[int, tuple[int, int]] = defaultdict(lambda: (0, 1))
        self._next_client = 1
        # Nodes whose fsyncs do not complete until `complete_held_flushes` (the rest: at once).
        self.hold_flushes: set[int] = set()
        self.held_flushes: dict[int, list[LogFlush]] = defaultdict(list)
        for node_id in voters:
            self.start(node_id, MemoryLog() if static else bootstrap_log(voter_set(voters)), static_voters=static)
        for node_id in observers:
            self.start(node_id, MemoryLog(), static_voters=static)

    # -- lifecycle -----------------------------------------------------------------------------
    def start(
        self,
        node_id: int,
        log: MemoryLog,
        persisted: ElectionState | None = None,
        *,
        static_voters: VoterSet | bool | None = True,
        config: RaftConfig | None = None,
        endpoints: tuple[Endpoint, ...] | None = None,
    ) -> NodeRecord:
        voters = self.static_voters if static_voters is True else (static_voters or None)
        node = RaftNode(
            config=config or self.config,
            node_id=node_id,
            directory_id=directory(node_id),
            cluster_id=CLUSTER_ID,
            log=log,
            persisted=persisted,
            static_voters=voters,
            rng=random.Random(self.seed * 1000 + node_id),
            now_ms=self.now_ms,
            local_endpoints=endpoints or (endpoint(node_id),),
            bootstrap_servers=() if voters is not None else tuple(endpoint(i) for i in self.voter_ids),
        )
        record = NodeRecord(node=node, log=log, persisted=persisted)
        self.records[node_id] = record
        self.apply(node_id, node.poll(self.now_ms))
        return record

    def client_request(self, node_id: int, request: Any) -> int:
        """An admin request (AddRaftVoter, DescribeQuorum...) to `node_id`; see client_responses."""
        client_token = self._next_client
        self._next_client += 1
        token = self._next_inbound
        self._next_inbound += 1
        self.inbound[(node_id, token)] = (CLIENT, client_token)
        self.apply(node_id, self.node(node_id).handle_request(wire(request), token=token, now_ms=self.now_ms))
        return client_token

    def crash(self, node_id: int) -> None:
        self.records[node_id].alive = False
        self.queue = [e for e in self.queue if e.destination != node_id and e.source != node_id]

    def kill(self, node_id: int) -> None:
        """The node's process dies and the OS closes its sockets: every peer request it held or
        had queued (a parked Fetch) fails DISCONNECTED at once, as a reset connection does, and
        later requests to it are refused (`deliver_one`)."""
        self.records[node_id].alive = False
        self.break_connections(lambda source, destination: destination == node_id)
        self.queue = [e for e in self.queue if e.source != node_id]

    def break_connections(self, broken: Callable[[int, int], bool]) -> None:
        """Reset the connections `broken(source, destination)` selects: their outstanding requests
        (queued or held by the destination) fail DISCONNECTED; late answers are ignored."""
        failed = [(e.source, e.token) for e in self.queue if e.is_request and broken(e.source, e.destination)]
        self.queue = [e for e in self.queue if not (e.is_request and broken(e.source, e.destination))]
        for (holder, token), (source, source_token) in list(self.inbound.items()):
            if source != CLIENT and broken(source, holder):
                del self.inbound[(holder, token)]
                failed.append((source, source_token))
        for source, source_token in failed:
            if self.records[source].alive:
                out = self.node(source).handle_response(source_token, RequestFailure.DISCONNECTED, now_ms=self.now_ms)
                self.apply(source, out)

    def restart(self, node_id: int, *, lose_unflushed: bool = True) -> NodeRecord:
        old = self.records[node_id]
        log = old.log
        if lose_unflushed:
            log.truncate_to(max(log.flushed_offset, log.log_start_offset))
        return self.start(node_id, log, old.persisted, static_voters=self.static_voters is not None)

    def node(self, node_id: int) -> RaftNode:
        return self.records[node_id].node

    def __getitem__(self, node_id: int) -> NodeRecord:
        return self.records[node_id]

    # -- effects -------------------------------------------------------------------------------
    def apply(self, node_id: int, out: Output) -> Output:
        record = self.records[node_id]
        if out.persist is not None:
            record.persisted = out.persist
            record.persist_history.append(out.persist)
        for message in out.messages:
            if isinstance(message, OutboundRequest):
                destination = message.destination_id
                if destination < 0:
                    destination = message.endpoints[0].port - 19000  # a bootstrap server
                envelope = Envelope(node_id, destination, True, message.token, wire(message.request))
            else:
                if (node_id, message.token) not in self.inbound:
                    continue  # the requester's connection was broken: nobody is listening
                source, token = self.inbound.pop((node_id, message.token))
                if source == CLIENT:
                    self.client_responses[token] = wire(message.response)
                    continue
                envelope = Envelope(node_id, source, False, token, wire(message.response))
            self.sent.append(envelope)
            self.queue.append(envelope)
        record.events.extend(out.events)
        if out.flush is not None:
            if node_id in self.hold_flushes:
                self.held_flushes[node_id].append(out.flush)
            else:
                # An fsync that completes at once, after this Output's sends.
                self.complete_flush(node_id, out.flush)
        return out

    def complete_flush(self, node_id: int, flush: LogFlush) -> None:
        record = self.records[node_id]
        record.log.flush_to(flush.end_offset)
        self.apply(node_id, record.node.handle_log_flushed(flush, now_ms=self.now_ms))

    def complete_held_flushes(self, node_id: int) -> None:
        """The fsyncs `node_id` asked for while its flushes were held complete now, in order."""
        held, self.held_flushes[node_id] = self.held_flushes[node_id], []
        for flush in held:
            self.complete_flush(node_id, flush)

    def deliver_one(self) -> Envelope | None:
        if not self.queue:
            return None
        envelope = self.queue.pop(0)
        destination = self.records.get(envelope.destination)
        if destination is None or not destination.alive or self.drop(envelope):
            if envelope.is_request and self.records.get(envelope.source) and self.records[envelope.source].alive:
                self.apply(envelope.source, self.node(envelope.source).handle_response(envelope.token, RequestFailure.DISCONNECTED, now_ms=self.now_ms))
            return envelope
        if envelope.is_request and type(envelope.payload).__name__ == "ApiVersionsRequest":
            # The node process (not the raft core) answers ApiVersions.
            self.apply(envelope.source, self.node(envelope.source).handle_response(
                envelope.token, api_versions_response(self.supported_kraft[envelope.destination]), now_ms=self.now_ms))
            return envelope
        if envelope.is_request:
            token = self._next_inbound
            self._next_inbound += 1
            self.inbound[(envelope.destination, token)] = (envelope.source, envelope.token)
            self.apply(envelope.destination, destination.node.handle_request(envelope.payload, token=token, now_ms=self.now_ms))
        else:
            self.apply(envelope.destination, destination.node.handle_response(envelope.token, envelope.payload, now_ms=self.now_ms))
        return envelope

    def deliver_all(self, limit: int = 10_000) -> None:
        for _ in range(limit):
            if self.deliver_one() is None:
                return
        raise AssertionError("messages did not quiesce")

    def poll_all(self) -> None:
        for node_id, record in list(self.records.items()):
            if record.alive:
                self.apply(node_id, record.node.poll(self.now_ms))

    def advance(self, ms: int) -> None:
        """Move time forward in small steps, polling and delivering as a real driver would."""
        end = self.now_ms + ms
        while True:
            self.deliver_all()
            self.poll_all()
            self.deliver_all()
            due = min(
                (r.node.next_deadline_ms(self.now_ms) for r in self.records.values() if r.alive),
                default=end,
            )
            if due > self.now_ms and self.now_ms >= end:
                return
            self.now_ms = min(max(due, self.now_ms + 1 if due <= self.now_ms else due), end) if self.now_ms < end else self.now_ms
            if self.now_ms >= end and due > end:
                self.deliver_all()
                self.poll_all()
                self.deliver_all()
                return

    def leader(self) -> RaftNode | None:
        leaders = [r.node for r in self.records.values() if r.alive and r.node.role.value == "Leader"]
        highest = max((n.epoch for n in leaders), default=None)
        current = [n for n in leaders if n.epoch == highest]
        return current[0] if current else None

    def elect(self, node_id: int | None = None, max_ms: int = 30_000) -> RaftNode:
        """Advance time until a leader exists (and is `node_id` if given)."""
        waited = 0
        while waited < max_ms:
            leader = self.leader()
            if leader is not None and (node_id is None or leader.node_id == node_id):
                return leader
            self.advance(50)
            waited += 50
        raise AssertionError(f"no leader after {max_ms} ms")


class FlushAtOnceNode(RaftNode):
    """A node whose driver's fsync completes within the call that asked for it: each Output
    already holds what the completed flush added (for request-level tests of one node)."""

    def _finish(self, now_ms: int) -> Output:
        out = super()._finish(now_ms)
        if out.flush is not None:
            log = self.log
            assert isinstance(log, MemoryLog)
            log.flush_to(out.flush.end_offset)
            more = self.handle_log_flushed(out.flush, now_ms=now_ms)
            out.persist = more.persist or out.persist
            out.messages.extend(more.messages)
            out.events.extend(more.events)
            out.next_deadline_ms = more.next_deadline_ms
            out.shutdown_complete = more.shutdown_complete
        return out


def make_node(
    node_id: int,
    voters: list[int],
    *,
    log: MemoryLog | None = None,
    persisted: ElectionState | None = None,
    config: RaftConfig | None = None,
    now_ms: int = 1_000_000,
    seed: int = 0,
) -> RaftNode:
    """One node on its own, for request/response-level tests (its flushes complete at once)."""
    return FlushAtOnceNode(
        config=config or RaftConfig(),
        node_id=node_id,
        directory_id=directory(node_id),
        cluster_id=CLUSTER_ID,
        log=log if log is not None else MemoryLog(),
        persisted=persisted,
        static_voters=voter_set(voters),
        rng=random.Random(seed),
        now_ms=now_ms,
        local_endpoints=(endpoint(node_id),),
    )


def only_response(out: Output) -> Any:
    responses = out.responses
    assert len(responses) == 1, out.messages
    return wire(responses[0].response)
