"""A Kafka-protocol admin client for the controller quorum: what `kraft metadata-quorum`, the
quickstart, the tests and (later) the operator use to describe and change the voter set.

It mirrors what Kafka's Admin does with `bootstrap.controllers`: DescribeCluster (endpoint type
2) on any bootstrap controller tells the cluster id, the active controller (raft leader) and the
controllers' endpoints; DescribeQuorum, AddRaftVoter and RemoveRaftVoter then go to the leader.
Elections in progress (no leader yet, NOT_LEADER_OR_FOLLOWER from a stale leader) are retried
until the timeout; every other error is returned to the caller as `QuorumAdminError` with Kafka's
error name.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.errors import AdminError
from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.protocol import (
    ConnectionConfig,
    KafkaConnection,
    KafkaProtocolError,
    request_class,
)
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.protocol.version_bridging import bridge
from kraft_engine.raft import Endpoint, ReplicaKey
from kraft_engine.raft import messages as raft_messages

__all__ = [
    "ClusterDescription",
    "QuorumAdmin",
    "QuorumAdminError",
    "QuorumDescription",
    "ReplicaDescription",
]

_DESCRIBE_CLUSTER = 60
_RETRIABLE = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_controller,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)
_RETRY_INTERVAL_S = 0.1
_VOTER_CHANGE_TIMED_OUT = (
    "the leader has another voter change that is not committed yet, has not committed anything in its epoch, "
    "or the new voter did not catch up in time; retry once the quorum has settled"
)


def _error_text(what: str, code: ErrorCode, message: str | None) -> str:
    """`What: ERROR_NAME` plus the server's message when it sent one (Kafka's are often null)."""
    return f"{what}: {code.name.upper()}" + (f": {message}" if message else "")


class QuorumAdminError(AdminError):
    """A refusal from the quorum (Kafka error name and message) or no usable controller."""

    def __init__(self, message: str, *, error: ErrorCode | None = None) -> None:
        super().__init__(message)
        self.error = error


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    replica_id: int
    directory_id: uuid.UUID
    log_end_offset: int
    last_fetch_timestamp_ms: int
    last_caught_up_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class QuorumDescription:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaDescription, ...]
    observers: tuple[ReplicaDescription, ...]
    nodes: dict[int, tuple[Endpoint, ...]]

    @property
    def leader(self) -> ReplicaDescription | None:
        return next((v for v in self.voters if v.replica_id == self.leader_id), None)


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str
    controller_id: int
    controllers: dict[int, tuple[str, int]]


class QuorumAdmin:
    """Connections to the bootstrap controllers and to whichever node leads the quorum."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, timeout_ms: int = 15000,
                 security: ClientSecurity | None = None) -> None:
        """`security`: the client security keys of the tools' `--command-config` (plaintext when None)."""
        if not bootstrap:
            raise ValueError("no bootstrap controllers given")
        self._bootstrap = [(str(host), int(port)) for host, port in bootstrap]
        self.timeout_ms = timeout_ms
        self._config = ConnectionConfig(
            client_id="kraft-metadata-quorum",
            request_timeout_ms=min(timeout_ms, 5000),
            socket_connection_setup_timeout_ms=min(timeout_ms, 2000),
            security=security,
        )
        self._connections: dict[tuple[str, int], KafkaConnection] = {}

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()

    async def __aenter__(self) -> QuorumAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ----------------------------------------------------------------------------
    def _connection(self, address: tuple[str, int]) -> KafkaConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = KafkaConnection(address[0], address[1], config=self._config)
            self._connections[address] = connection
        return connection

    async def _send(self, address: tuple[str, int], request: Any, *, timeout_ms: int | None = None,
                    downgrade: bool = False) -> Any | None:
        """One exchange; None when the node is unreachable (the caller tries elsewhere).

        A node that refuses the connection gets one attempt, not the whole request timeout of
        reconnects: as in Kafka's admin client a disconnect fails the call at once, and the
        caller looks up the active controller again (after a failover, a new one).
        `downgrade`: a request newer than the peer serves goes at the highest version it does
        (copied field by field; the caller vouches that the fields it drops change nothing)."""
        connection = self._connection(address)
        try:
            if not connection.connected:
                deadline = asyncio.get_running_loop().time() + self._config.socket_connection_setup_timeout_ms / 1000
                if not await connection.try_connect(deadline=deadline):
                    return None
            if downgrade:
                api_key = int(type(request).__api_key__)
                version = connection.negotiated_version(api_key)
                if version < int(type(request).__version__):
                    request = bridge(request, request_class(api_key, version))
            return await connection.send(request, timeout_ms=timeout_ms or self._config.request_timeout_ms)
        except (KafkaProtocolError, OSError):
            with contextlib.suppress(Exception):
                await connection.disconnect()
            return None

    async def _retrying(self, attempt: Any, *, what: str) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        last: str = "no controller answered"
        while True:
            try:
                result = await attempt()
            except QuorumAdminError as e:
                if e.error not in _RETRIABLE:
                    raise
                result = None
                last = str(e)
            if result is not None:
                return result
            if loop.time() >= deadline:
                raise QuorumAdminError(f"{what} failed within {self.timeout_ms} ms: {last}")
            await asyncio.sleep(_RETRY_INTERVAL_S)

    # -- DescribeCluster -----------------------------------------------------------------------
    async def describe_cluster(self) -> ClusterDescription:
        async def attempt() -> ClusterDescription | None:
            for address in self._bootstrap:
                described = await self._describe_cluster_at(address)
                if described is not None:
                    return described
            return None

        result: ClusterDescription = await self._retrying(attempt, what="DescribeCluster")
        return result

    async def _describe_cluster_at(self, address: tuple[str, int]) -> ClusterDescription | None:
        request = request_class(_DESCRIBE_CLUSTER, 1)(
            include_cluster_authorized_operations=False, endpoint_type=i8(2)
        )
        response = await self._send(address, request)
        if response is None:
            return None
        if response.error_code != ErrorCode.none:
            raise QuorumAdminError(
                _error_text("DescribeCluster", ErrorCode(response.error_code), response.error_message),
                error=ErrorCode(response.error_code),
            )
        return ClusterDescription(
            cluster_id=response.cluster_id,
            controller_id=int(response.controller_id),
            controllers={int(b.broker_id): (b.host, int(b.port)) for b in response.brokers},
        )

    async def _leader_address(self) -> tuple[str, int] | None:
        """The leader's address, from DescribeCluster on any reachable bootstrap controller."""
        for address in self._bootstrap:
            described = await self._describe_cluster_at(address)
            if described is None or described.controller_id < 0:
                continue
            leader = described.controllers.get(described.controller_id)
            if leader is not None:
                return leader
        return None

    # -- DescribeQuorum ------------------------------------------------------------------------
    async def describe_quorum(self) -> QuorumDescription:
        async def attempt() -> QuorumDescription | None:
            leader = await self._leader_address()
            candidates = ([leader] if leader is not None else []) + [a for a in self._bootstrap if a != leader]
            for address in candidates:
                response = await self._send(address, raft_messages.describe_quorum_request())
                if response is None:
                    continue
                described = _quorum_description(response)
                if described is not None:
                    return described
            return None

        result: QuorumDescription = await self._retrying(attempt, what="DescribeQuorum")
        return result

    # -- voter changes -------------------------------------------------------------------------
    async def add_raft_voter(
        self, *, cluster_id: str | None, voter: ReplicaKey, endpoints: tuple[Endpoint, ...]
    ) -> None:
        request = raft_messages.add_voter_request(
            cluster_id=cluster_id or "", voter=voter, endpoints=endpoints, timeout_ms=self.timeout_ms
        )
        if cluster_id is None:
            request = dataclasses.replace(request, cluster_id=None)
        await self._voter_change(request, what="AddRaftVoter")

    async def remove_raft_voter(self, *, cluster_id: str | None, voter: ReplicaKey) -> None:
        request = raft_messages.remove_voter_request(cluster_id=cluster_id or "", voter=voter)
        if cluster_id is None:
            request = dataclasses.replace(request, cluster_id=None)
        await self._voter_change(request, what="RemoveRaftVoter")

    async def _voter_change(self, request: Any, *, what: str) -> None:
        async def attempt() -> bool | None:
            leader = await self._leader_address()
            if leader is None:
                return None
            # The leader answers once the new voter set is committed, or at the request's own
            # timeout: wait that long, not a request timeout's 5 s. Kafka 4.1 serves AddRaftVoter
            # v0 only, whose leader always answers once committed, as v1's AckWhenCommitted=true
            # (the one field v0 lacks) asks.
            response = await self._send(leader, request, timeout_ms=self.timeout_ms + self._config.request_timeout_ms,
                                        downgrade=True)
            if response is None:
                return None
            code = ErrorCode(response.error_code)
            if code != ErrorCode.none:
                message = response.error_message
                if code == ErrorCode.request_timed_out and not message:
                    # The leader's gates all answer REQUEST_TIMED_OUT (as Kafka's do); say which.
                    message = _VOTER_CHANGE_TIMED_OUT
                raise QuorumAdminError(_error_text(what, code, message), error=code)
            return True

        await self._retrying(attempt, what=what)


def _quorum_description(response: Any) -> QuorumDescription | None:
    """The leader's answer as a description; None for a non-leader's NOT_LEADER_OR_FOLLOWER."""
    code = ErrorCode(response.error_code)
    if code != ErrorCode.none:
        raise QuorumAdminError(_error_text("DescribeQuorum", code, response.error_message), error=code)
    partition = response.topics[0].partitions[0]
    code = ErrorCode(partition.error_code)
    if code in _RETRIABLE:
        return None
    if code != ErrorCode.none:
        raise QuorumAdminError(_error_text("DescribeQuorum", code, partition.error_message), error=code)

    def replica(state: Any) -> ReplicaDescription:
        return ReplicaDescription(
            replica_id=int(state.replica_id),
            directory_id=state.replica_directory_id or ZERO_UUID,
            log_end_offset=int(state.log_end_offset),
            last_fetch_timestamp_ms=int(state.last_fetch_timestamp),
            last_caught_up_timestamp_ms=int(state.last_caught_up_timestamp),
        )

    return QuorumDescription(
        leader_id=int(partition.leader_id),
        leader_epoch=int(partition.leader_epoch),
        high_watermark=int(partition.high_watermark),
        voters=tuple(replica(v) for v in partition.current_voters),
        observers=tuple(replica(o) for o in partition.observers),
        nodes={
            int(node.node_id): tuple(Endpoint(str(e.name), str(e.host), int(e.port)) for e in node.listeners)
            for node in response.nodes
        },
    )
