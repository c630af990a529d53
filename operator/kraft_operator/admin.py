"""The operator's Kafka admin client: what the operator asks a running cluster, over Kafka's protocol.

Async, on the engine's protocol client (`KafkaConnection`, kio entities) and its quorum admin
(`kraft_engine.admin`), and usable against controllers and brokers, ours and Apache Kafka's:
- DescribeQuorum, through `QuorumAdmin`, which asks the leader that DescribeCluster names and
  follows the leader hint again when a stale leader answers NOT_LEADER_OR_FOLLOWER;
- DescribeCluster on controllers (endpoint type 2) and on brokers (type 1, v2 with fenced brokers);
- Metadata (on a broker; our controllers serve it too, Kafka's do not);
- DescribeConfigs, ApiVersions' finalized features (DescribeFeatures is ApiVersions in Kafka's
  Admin), DescribeLogDirs.
Every request goes to the addresses given in turn until one answers; retriable errors (a node
down, NOT_CONTROLLER, NOT_LEADER_OR_FOLLOWER, an election) are retried until `timeout_ms`; other
errors raise `AdminError` with Kafka's error name, which callers can tell apart by `error`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from kio.schema.alter_replica_log_dirs.v2.request import (
    AlterReplicaLogDir,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirTopic,
)
from kio.schema.errors import ErrorCode
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta

from kraft_engine.admin import (
    ControllerAdmin,
    ControllerAdminError,
    QuorumAdmin,
    QuorumAdminError,
    QuorumDescription,
)
from kraft_engine.protocol import (
    API_VERSIONS_KEY,
    ConnectionConfig,
    KafkaConnection,
    KafkaProtocolError,
    request_class,
)
from kraft_engine.protocol.security import ClientSecurity

__all__ = [
    "AdminError",
    "AdminUnreachable",
    "ClusterAdmin",
    "LogDirDescription",
    "LogDirReplicaDescription",
    "MetadataDescription",
    "NodeDescription",
    "PartitionDescription",
    "TopicDescription",
    "create_topic",
    "under_min_isr",
]

_METADATA = 3
_CREATE_TOPICS = 19
_DESCRIBE_CONFIGS = 32
_DESCRIBE_LOG_DIRS = 35
_DESCRIBE_CLUSTER = 60
_TOPIC_RESOURCE = 2
_BROKER_RESOURCE = 4
_DYNAMIC_BROKER_CONFIG = 1  # DescribeConfigs ConfigSource
_BROKER_ENDPOINTS = 1
_CONTROLLER_ENDPOINTS = 2
_RETRY_INTERVAL_S = 0.1
_RETRIABLE = frozenset(
    {
        ErrorCode.not_controller,
        ErrorCode.not_leader_or_follower,
        ErrorCode.leader_not_available,
        ErrorCode.broker_not_available,
        ErrorCode.request_timed_out,
        ErrorCode.coordinator_load_in_progress,
    }
)

_T = TypeVar("_T")
Address = tuple[str, int]


class AdminError(Exception):
    """A refusal: which API, Kafka's error name and the server's message."""

    def __init__(self, message: str, *, api: str, error: ErrorCode | None = None, retriable: bool = False) -> None:
        super().__init__(message)
        self.api = api
        self.error = error
        self._retriable = retriable

    @property
    def retriable(self) -> bool:
        return self._retriable or self.error in _RETRIABLE


class AdminUnreachable(AdminError):
    """No address answered (or none without a retriable error) within the timeout."""


@dataclass(frozen=True, slots=True)
class NodeDescription:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = False


@dataclass(frozen=True, slots=True)
class PartitionDescription:
    partition: int
    leader_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicDescription:
    name: str
    partitions: tuple[PartitionDescription, ...]


@dataclass(frozen=True, slots=True)
class MetadataDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[NodeDescription, ...]
    topics: tuple[TopicDescription, ...]


@dataclass(frozen=True, slots=True)
class LogDirReplicaDescription:
    topic: str
    partition: int
    size_bytes: int
    future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    path: str
    error: str | None
    total_bytes: int
    usable_bytes: int
    replicas: tuple[LogDirReplicaDescription, ...] = ()


def _check(api: str, code: int, message: str | None = None) -> None:
    if code != ErrorCode.none:
        error = ErrorCode(code)
        text = f"{api}: {error.name.upper()}" + (f": {message}" if message else "")
        raise AdminError(text, api=api, error=error)


class ClusterAdmin:
    """Connections to a cluster's controllers and brokers (either list may be empty)."""

    def __init__(
        self,
        *,
        controllers: Sequence[Address] = (),
        brokers: Sequence[Address] = (),
        timeout_ms: int = 5000,
        client_id: str = "kraftwerk-operator",
        security: ClientSecurity | None = None,
    ) -> None:
        """`security`: how to connect (the operator's TLS identity under spec.tls; plaintext when None)."""
        self.controllers = [(str(h), int(p)) for h, p in controllers]
        self.brokers = [(str(h), int(p)) for h, p in brokers]
        self.timeout_ms = timeout_ms
        self._config = ConnectionConfig(
            client_id=client_id,
            request_timeout_ms=min(timeout_ms, 3000),
            socket_connection_setup_timeout_ms=min(timeout_ms, 1000),
            security=security,
        )
        self._connections: dict[Address, KafkaConnection] = {}
        self._quorum = QuorumAdmin(self.controllers, timeout_ms=timeout_ms, security=security) if (
            self.controllers) else None

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for connection in connections:
            await connection.close()
        if self._quorum is not None:
            await self._quorum.close()

    async def __aenter__(self) -> ClusterAdmin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- plumbing ----------------------------------------------------------------------------------
    def _connection(self, address: Address) -> KafkaConnection:
        connection = self._connections.get(address)
        if connection is None:
            connection = KafkaConnection(address[0], address[1], config=self._config)
            self._connections[address] = connection
        return connection

    async def _first_answer(
        self, addresses: Sequence[Address], api: str, attempt: Callable[[KafkaConnection], Awaitable[_T]]
    ) -> _T:
        """`attempt` on each address in turn, retried until the timeout while the failures are
        retriable; the first answer wins."""
        if not addresses:
            raise AdminUnreachable(f"{api}: no addresses to ask", api=api)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_ms / 1000
        last = "no answer"
        while True:
            for address in addresses:
                connection = self._connection(address)
                try:
                    await connection.connect(timeout_ms=self._config.socket_connection_setup_timeout_ms)
                    return await attempt(connection)
                except AdminError as e:
                    if not e.retriable:
                        raise
                    last = f"{address[0]}:{address[1]}: {e}"
                except (KafkaProtocolError, OSError) as e:
                    last = f"{address[0]}:{address[1]}: {type(e).__name__}: {e}"
                    with contextlib.suppress(Exception):
                        await connection.disconnect()
            if loop.time() >= deadline:
                raise AdminUnreachable(f"{api}: no answer within {self.timeout_ms} ms ({last})", api=api)
            await asyncio.sleep(_RETRY_INTERVAL_S)

    async def send_to_broker(self, request: Any, *, api: str) -> Any:
        """`request` answered by the first broker that answers (retriable failures retried)."""

        async def attempt(connection: KafkaConnection) -> Any:
            return await connection.send(request)

        return await self._first_answer(self.brokers, api, attempt)

    # -- the quorum --------------------------------------------------------------------------------
    async def describe_quorum(self) -> QuorumDescription:
        if self._quorum is None:
            raise AdminUnreachable("DescribeQuorum: no controllers to ask", api="DescribeQuorum")
        try:
            return await self._quorum.describe_quorum()
        except QuorumAdminError as e:
            raise AdminUnreachable(str(e), api="DescribeQuorum", error=e.error) from None

    # -- DescribeCluster ---------------------------------------------------------------------------
    async def describe_cluster(self, *, brokers: bool) -> tuple[str, int, tuple[NodeDescription, ...]]:
        """(cluster id, active controller id, nodes): the brokers (with fenced ones) from a broker,
        or the controllers from a controller."""
        endpoint = _BROKER_ENDPOINTS if brokers else _CONTROLLER_ENDPOINTS

        async def attempt(connection: KafkaConnection) -> tuple[str, int, tuple[NodeDescription, ...]]:
            version = min(2, connection.negotiated_version(_DESCRIBE_CLUSTER))
            fields: dict[str, Any] = {"include_cluster_authorized_operations": False}
            if version >= 1:
                fields["endpoint_type"] = i8(endpoint)
            if version >= 2:
                fields["include_fenced_brokers"] = brokers
            response = await connection.send(request_class(_DESCRIBE_CLUSTER, version)(**fields))
            _check("DescribeCluster", response.error_code, response.error_message)
            nodes = tuple(
                NodeDescription(int(b.broker_id), b.host, int(b.port), b.rack, bool(getattr(b, "is_fenced", False)))
                for b in response.brokers
            )
            return response.cluster_id, int(response.controller_id), nodes

        return await self._first_answer(self.brokers if brokers else self.controllers, "DescribeCluster", attempt)

    # -- Metadata ----------------------------------------------------------------------------------
    async def metadata(self) -> MetadataDescription:
        """All topics and partitions, from a broker, else from an active controller that serves
        Metadata (ours do; Kafka's controllers answer NOT_CONTROLLER or do not serve it)."""

        async def attempt(connection: KafkaConnection) -> MetadataDescription:
            if _METADATA not in connection.peer_api_versions:
                raise AdminError("Metadata: not served here", api="Metadata", error=ErrorCode.not_controller)
            version = min(12, connection.negotiated_version(_METADATA))
            fields: dict[str, Any] = {"topics": None, "allow_auto_topic_creation": False}
            if version >= 8:
                fields["include_topic_authorized_operations"] = False
            response = await connection.send(request_class(_METADATA, version)(**fields))
            topics = []
            for topic in response.topics:
                if topic.error_code not in (ErrorCode.none, ErrorCode.leader_not_available):
                    continue
                topics.append(
                    TopicDescription(
                        name=str(topic.name),
                        partitions=tuple(
                            PartitionDescription(
                                partition=int(p.partition_index),
                                leader_id=int(p.leader_id),
                                replicas=tuple(int(r) for r in p.replica_nodes),
                                isr=tuple(int(r) for r in p.isr_nodes),
                                offline_replicas=tuple(int(r) for r in p.offline_replicas),
                            )
                            for p in topic.partitions
                        ),
                    )
                )
            controller_id = int(response.controller_id)
            if not self.brokers and controller_id < 0:
                raise AdminError("Metadata: no active controller", api="Metadata", error=ErrorCode.not_controller)
            return MetadataDescription(
                cluster_id=response.cluster_id,
                controller_id=controller_id,
                brokers=tuple(NodeDescription(int(b.node_id), b.host, int(b.port), b.rack) for b in response.brokers),
                topics=tuple(topics),
            )

        return await self._first_answer(self.brokers or self.controllers, "Metadata", attempt)

    # -- DescribeConfigs ---------------------------------------------------------------------------
    async def describe_topic_configs(
        self, topics: Sequence[str], *, keys: Sequence[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """Each topic's configs in force (name -> value), optionally only `keys`."""
        if not topics:
            return {}
        found = await self._describe_configs(self.brokers or self.controllers, resource_type=_TOPIC_RESOURCE,
                                             names=topics, keys=keys)
        return {name: {k: value for k, (value, _) in configs.items()} for name, configs in found.items()}

    async def dynamic_broker_configs(self, broker: Address, *, broker_id: int, keys: Sequence[str]) -> dict[str, str]:
        """The configs set for this one broker (DescribeConfigs source DYNAMIC_BROKER_CONFIG), asked
        of the broker itself, as Kafka's Admin does for a broker resource."""
        found = await self._describe_configs([broker], resource_type=_BROKER_RESOURCE, names=[str(broker_id)], keys=keys)
        return {k: value for k, (value, source) in found.get(str(broker_id), {}).items()
                if source == _DYNAMIC_BROKER_CONFIG}

    async def _describe_configs(
        self, addresses: Sequence[Address], *, resource_type: int, names: Sequence[str], keys: Sequence[str] | None
    ) -> dict[str, dict[str, tuple[str, int]]]:
        """DescribeConfigs of resources of one type: name -> key -> (value, source)."""

        async def attempt(connection: KafkaConnection) -> dict[str, dict[str, tuple[str, int]]]:
            version = min(4, connection.negotiated_version(_DESCRIBE_CONFIGS))
            request_cls = request_class(_DESCRIBE_CONFIGS, version)
            module = __import__(request_cls.__module__, fromlist=["DescribeConfigsResource"])
            resources = tuple(
                module.DescribeConfigsResource(
                    resource_type=i8(resource_type),
                    resource_name=name,
                    configuration_keys=tuple(keys) if keys is not None else None,
                )
                for name in names
            )
            fields: dict[str, Any] = {"resources": resources, "include_synonyms": False}
            if version >= 3:
                fields["include_documentation"] = False
            response = await connection.send(request_cls(**fields))
            found: dict[str, dict[str, tuple[str, int]]] = {}
            for result in response.results:
                _check("DescribeConfigs", result.error_code, result.error_message)
                found[str(result.resource_name)] = {
                    str(c.name): (str(c.value), int(getattr(c, "config_source", -1)))
                    for c in result.configs if c.value is not None
                }
            return found

        return await self._first_answer(addresses, "DescribeConfigs", attempt)

    # -- features (ApiVersions) ----------------------------------------------------------------------
    async def finalized_features(self) -> dict[str, int]:
        """The finalized feature levels (metadata.version, kraft.version, ...) from ApiVersions, as
        Kafka's Admin.describeFeatures reads them. Asked afresh (the handshake's answer may predate
        the finalization); a node that has not loaded any finalized features yet (epoch -1, e.g. a
        controller still replaying its log) is skipped for the next one."""

        async def attempt(connection: KafkaConnection) -> dict[str, int]:
            response = await _api_versions(connection)
            if getattr(response, "finalized_features_epoch", -1) < 0:
                raise AdminError(
                    "ApiVersions: no finalized features loaded yet", api="ApiVersions", retriable=True
                )
            features = {str(f.name): int(f.max_version_level) for f in (response.finalized_features or ())}
            if "metadata.version" not in features:
                # every KRaft cluster finalizes metadata.version in its bootstrap: a node whose
                # answer lacks it has not loaded its image yet (seen under load in CI)
                raise AdminError(
                    "ApiVersions: metadata.version not loaded yet", api="ApiVersions", retriable=True
                )
            return features

        return await self._first_answer(self.controllers + self.brokers, "ApiVersions", attempt)

    async def supported_features(self, node: Address) -> dict[str, tuple[int, int]]:
        """One node's supported feature ranges (name -> (min, max) level) from its ApiVersions, as
        Kafka's controllers read a node's registration: what it can run."""

        async def attempt(connection: KafkaConnection) -> dict[str, tuple[int, int]]:
            response = await _api_versions(connection)
            return {str(f.name): (int(f.min_version), int(f.max_version)) for f in (response.supported_features or ())}

        return await self._first_answer([node], "ApiVersions", attempt)

    # -- DescribeLogDirs -----------------------------------------------------------------------------
    async def describe_log_dirs(self, broker: Address, *, partitions: bool = True) -> tuple[LogDirDescription, ...]:
        """One broker's log directories (DescribeLogDirs goes to the broker that holds them); with
        `partitions=False` the request names no topic, so the answer carries the directories alone."""

        async def attempt(connection: KafkaConnection) -> tuple[LogDirDescription, ...]:
            version = min(4, connection.negotiated_version(_DESCRIBE_LOG_DIRS))
            response = await connection.send(request_class(_DESCRIBE_LOG_DIRS, version)(topics=None if partitions else ()))
            if version >= 3:
                _check("DescribeLogDirs", response.error_code)
            return tuple(
                LogDirDescription(
                    path=str(r.log_dir),
                    error=None if r.error_code == ErrorCode.none else ErrorCode(r.error_code).name.upper(),
                    total_bytes=int(getattr(r, "total_bytes", -1)),
                    usable_bytes=int(getattr(r, "usable_bytes", -1)),
                    replicas=tuple(
                        LogDirReplicaDescription(topic=str(t.name), partition=int(p.partition_index),
                                                 size_bytes=int(p.partition_size), future=bool(p.is_future_key))
                        for t in r.topics for p in t.partitions
                    ),
                )
                for r in response.results
            )

        return await self._first_answer([broker], "DescribeLogDirs", attempt)

    # -- AlterReplicaLogDirs ---------------------------------------------------------------------------
    async def alter_replica_log_dirs(
        self, broker: Address, moves: Sequence[tuple[str, int, str]]
    ) -> dict[tuple[str, int], str | None]:
        """Move replicas of `broker` between its own log directories ((topic, partition, destination)
        each); each replica's error name, None where the move is under way."""

        async def attempt(connection: KafkaConnection) -> dict[tuple[str, int], str | None]:
            by_dir: dict[str, dict[str, list[int]]] = {}
            for topic, partition, log_dir in moves:
                by_dir.setdefault(log_dir, {}).setdefault(topic, []).append(partition)
            request = AlterReplicaLogDirsRequest(dirs=tuple(
                AlterReplicaLogDir(path=path, topics=tuple(
                    AlterReplicaLogDirTopic(name=TopicName(topic), partitions=tuple(i32(p) for p in partitions))
                    for topic, partitions in topics.items()))
                for path, topics in by_dir.items()))
            response = await connection.send(request)
            return {
                (str(t.topic_name), int(p.partition_index)):
                    None if p.error_code == ErrorCode.none else ErrorCode(p.error_code).name.upper()
                for t in response.results for p in t.partitions
            }

        return await self._first_answer([broker], "AlterReplicaLogDirs", attempt)


async def _api_versions(connection: KafkaConnection) -> Any:
    """ApiVersions asked afresh (the handshake's answer may predate a finalization)."""
    version = min(3, connection.negotiated_version(API_VERSIONS_KEY))
    fields: dict[str, Any] = {}
    if version >= 3:
        fields = {"client_software_name": "kraftwerk", "client_software_version": "0"}
    response = await connection.send(request_class(API_VERSIONS_KEY, version)(**fields))
    _check("ApiVersions", response.error_code)
    return response


async def create_topic(
    controllers: Sequence[Address], *, name: str, partitions: int, replication_factor: int, timeout_ms: int = 30000,
    security: ClientSecurity | None = None,
) -> bool:
    """CreateTopics on the active controller (as Kafka's Admin with bootstrap.controllers does).
    True when created, False when it already existed; AdminError for any other refusal."""
    request = request_class(_CREATE_TOPICS, 7)
    module = __import__(request.__module__, fromlist=["CreatableTopic"])
    topic = module.CreatableTopic(
        name=name, num_partitions=i32(partitions), replication_factor=i16(replication_factor),
        assignments=(), configs=(),
    )
    body = request(topics=(topic,), timeout=i32Timedelta.parse(timedelta(milliseconds=timeout_ms)), validate_only=False)
    async with ControllerAdmin(list(controllers), timeout_ms=timeout_ms, client_id="kraftwerk-operator",
                               security=security) as admin:
        try:
            response = await admin.send_to_active(body)
        except ControllerAdminError as e:
            raise AdminUnreachable(str(e), api="CreateTopics") from None
    [result] = response.topics
    if result.error_code == ErrorCode.topic_already_exists:
        return False
    _check("CreateTopics", result.error_code, result.error_message)
    return True


def under_min_isr(
    topics: Sequence[TopicDescription], min_isr: Mapping[str, int], *, default_min_isr: int = 1
) -> int:
    """Partitions whose ISR is smaller than their topic's min.insync.replicas."""
    return sum(
        1
        for topic in topics
        for p in topic.partitions
        if len(p.isr) < min_isr.get(topic.name, default_min_isr)
    )
