"""A node's `server.properties`, read with Kafka's keys, defaults and validation rules.

Operators carry their Kafka habits and files over, so the engine accepts the same keys
(`process.roles`, `controller.quorum.voters`, ...) with the same defaults and refuses the same
broken combinations that Kafka's `KafkaConfig` refuses, with an error that names the key. Keys we
do not know are kept (Kafka only warns about them), so a Kafka file with tuning we ignore still
loads.

Two keys are ours: `kraftwerk.metrics.port`, the port of the Prometheus metrics and health HTTP
endpoint (default 0: disabled), and `kraftwerk.test.state.machine.enable` (default false), which
puts the append-only test store behind the raft listener instead of the quorum controller (for
the raft-level process tests and bench/quorum.py only).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kraft_engine.errors import ServerError
from kraft_engine.node_config_keys import NODE_WIRING_KEYS
from kraft_engine.protocol.security import is_security_key
from kraft_engine.raft.config import RaftConfig
from kraft_engine.records.compression import COMPRESSION_LEVELS
from kraft_engine.storage.java_properties import JavaPropertiesError, parse_properties

__all__ = [
    "ConfigError",
    "Endpoint",
    "HostPort",
    "KafkaConfig",
    "ProcessRole",
    "QuorumVoter",
    "load_config",
    "parse_config",
    "parse_quorum_voters",
]


_log = logging.getLogger(__name__)


class ConfigError(ServerError, ValueError):
    """A configuration the node refuses to run with; the message names the key and the reason."""


class ProcessRole(StrEnum):
    BROKER = "broker"
    CONTROLLER = "controller"


class Endpoint(BaseModel):
    """One listener: `NAME://host:port`. An empty host means every interface."""

    model_config = ConfigDict(frozen=True)

    listener_name: str
    host: str
    port: int
    security_protocol: str

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


class QuorumVoter(BaseModel):
    """One entry of `controller.quorum.voters`: `id@host:port`."""

    model_config = ConfigDict(frozen=True)

    voter_id: int
    host: str
    port: int


class HostPort(BaseModel):
    """One entry of `controller.quorum.bootstrap.servers`: `host:port`."""

    model_config = ConfigDict(frozen=True)

    host: str
    port: int


_SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
_DEFAULT_LISTENERS = "PLAINTEXT://:9092"
_DEFAULT_SECURITY_PROTOCOL_MAP = ",".join(f"{p}:{p}" for p in _SECURITY_PROTOCOLS)
_DEFAULT_LOG_DIR = "/tmp/kafka-logs"
# Kafka's own LogConfig defaults, which the metadata log inherits.
_DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
_DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
_INT_MAX = 2**31 - 1
_LONG_MAX = 2**63 - 1
_LOG_OVERHEAD_BYTES = 12  # offset (8) + size (4): the smallest a segment can be

# Kafka's listener grammar: NAME://host:port, where host may be empty or a bracketed IPv6 literal.
_ENDPOINT_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


class KafkaConfig(BaseModel):
    """The typed, validated view of a `server.properties` file.

    Field names are Kafka's keys with '.' turned into '_'; `originals` keeps every key as written
    and `unknown_keys` lists the ones this engine does not interpret.
    """

    model_config = ConfigDict(frozen=True)

    process_roles: frozenset[ProcessRole]
    node_id: int
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    listener_security_protocol_map: dict[str, str]
    controller_listener_names: tuple[str, ...]
    inter_broker_listener_name: str
    controller_quorum_voters: tuple[QuorumVoter, ...]
    controller_quorum_bootstrap_servers: tuple[HostPort, ...]
    controller_quorum_election_timeout_ms: int = 1000
    controller_quorum_election_backoff_max_ms: int = 1000
    controller_quorum_fetch_timeout_ms: int = 2000
    controller_quorum_request_timeout_ms: int = 2000
    controller_quorum_retry_backoff_ms: int = 20
    controller_quorum_append_linger_ms: int = 25
    controller_quorum_auto_join_enable: bool = False
    controller_quorum_fetch_max_bytes: int = 1024 * 1024
    controller_quorum_fetch_snapshot_max_bytes: int = 1024 * 1024
    log_dirs: tuple[str, ...]
    metadata_log_dir: str
    metadata_log_segment_bytes: int = _DEFAULT_SEGMENT_BYTES
    # Kafka's internal key: how long a deleted metadata snapshot or segment waits before unlinking.
    internal_metadata_delete_delay_millis: int = 60_000
    metadata_log_max_record_bytes_between_snapshots: int = 20 * 1024 * 1024
    metadata_log_max_snapshot_interval_ms: int = 60 * 60 * 1000
    metadata_max_retention_bytes: int = 100 * 1024 * 1024
    metadata_max_retention_ms: int = _DEFAULT_RETENTION_MS
    broker_heartbeat_interval_ms: int = 2000
    broker_session_timeout_ms: int = 9000
    socket_request_max_bytes: int = 100 * 1024 * 1024
    connections_max_idle_ms: int = 600_000
    max_connections: int = 2**31 - 1
    max_connections_per_ip: int = 2**31 - 1
    # max.connections.per.ip.overrides: host name or IP -> its own limit, in the order given.
    max_connections_per_ip_overrides: dict[str, int] = Field(default_factory=dict)
    unstable_feature_versions_enable: bool = False
    kraftwerk_metrics_port: int = 0
    kraftwerk_test_state_machine_enable: bool = False
    # Broker keys (Kafka's ServerConfigs / ReplicationConfigs / ServerLogConfigs defaults).
    num_partitions: int = 1
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1024 * 1024
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30_000
    num_replica_fetchers: int = 1
    # Replication throttles (Kafka's QuotaConfigs; the rates are dynamic broker configs too).
    leader_replication_throttled_rate: int = _LONG_MAX
    follower_replication_throttled_rate: int = _LONG_MAX
    replica_alter_log_dirs_io_max_bytes_per_second: int = _LONG_MAX
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    alter_log_dirs_replication_quota_window_num: int = 11
    alter_log_dirs_replication_quota_window_size_seconds: int = 1
    unclean_leader_election_enable: bool = False
    auto_create_topics_enable: bool = True
    offsets_topic_replication_factor: int = 3
    offsets_topic_num_partitions: int = 50
    # The group coordinator (Kafka's GroupCoordinatorConfig defaults).
    offsets_topic_segment_bytes: int = 100 * 1024 * 1024
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offsets_commit_timeout_ms: int = 5000
    offset_metadata_max_bytes: int = 4096
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_max_size: int = _INT_MAX
    message_max_bytes: int = 1024 * 1024 + 12
    max_request_partition_size_limit: int = 2000
    log_segment_bytes: int = _DEFAULT_SEGMENT_BYTES
    log_retention_ms: int = _DEFAULT_RETENTION_MS
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: int = 5 * 60 * 1000
    log_roll_ms: int = 7 * 24 * 3_600_000  # log.roll.hours=168
    log_roll_jitter_ms: int = 0
    compression_type: str = "producer"
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_delete_retention_ms: int = 86_400_000
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = _LONG_MAX
    log_segment_delete_delay_ms: int = 60_000
    log_flush_interval_messages: int = _LONG_MAX
    # How often each offset checkpoint is written (Kafka's defaults; 0 = only at shutdown and
    # when an operation writes them, where Kafka's scheduler would run the task once).
    replica_high_watermark_checkpoint_interval_ms: int = 5000
    log_flush_offset_checkpoint_interval_ms: int = 60_000
    log_flush_start_offset_checkpoint_interval_ms: int = 60_000
    initial_broker_registration_timeout_ms: int = 60_000
    broker_rack: str | None = None
    originals: dict[str, str] = Field(default_factory=dict)
    unknown_keys: tuple[str, ...] = ()

    @property
    def is_controller(self) -> bool:
        return ProcessRole.CONTROLLER in self.process_roles

    @property
    def is_broker(self) -> bool:
        return ProcessRole.BROKER in self.process_roles

    @property
    def controller_listeners(self) -> tuple[Endpoint, ...]:
        return tuple(e for e in self.listeners if e.listener_name in self.controller_listener_names)

    @property
    def effective_advertised_controller_listeners(self) -> tuple[Endpoint, ...]:
        """Per controller listener name: its advertised endpoint, else its bound one (Kafka's order)."""
        found: list[Endpoint] = []
        for name in self.controller_listener_names:
            match = next((e for e in self.advertised_listeners if e.listener_name == name), None)
            match = match or next((e for e in self.listeners if e.listener_name == name), None)
            if match is not None:
                found.append(match)
        return tuple(found)

    @property
    def effective_advertised_broker_listeners(self) -> tuple[Endpoint, ...]:
        return tuple(e for e in self.advertised_listeners if e.listener_name not in self.controller_listener_names)

    def raft_config(self) -> RaftConfig:
        """The consensus core's settings, from the `controller.quorum.*` and `metadata.*` keys."""
        # _validate guarantees a controller listener name on every KRaft node.
        return RaftConfig(
            election_timeout_ms=self.controller_quorum_election_timeout_ms,
            election_backoff_max_ms=self.controller_quorum_election_backoff_max_ms,
            fetch_timeout_ms=self.controller_quorum_fetch_timeout_ms,
            request_timeout_ms=self.controller_quorum_request_timeout_ms,
            retry_backoff_ms=self.controller_quorum_retry_backoff_ms,
            append_linger_ms=self.controller_quorum_append_linger_ms,
            auto_join_enable=self.controller_quorum_auto_join_enable,
            fetch_max_bytes=self.controller_quorum_fetch_max_bytes,
            fetch_snapshot_max_bytes=self.controller_quorum_fetch_snapshot_max_bytes,
            retention_max_bytes=self.metadata_max_retention_bytes,
            retention_max_ms=self.metadata_max_retention_ms,
            controller_listener_name=self.controller_listener_names[0],
        )

    @property
    def all_log_dirs(self) -> tuple[str, ...]:
        """`log.dirs` plus `metadata.log.dir`, sorted and distinct: what `kraft storage` formats."""
        return tuple(sorted({*self.log_dirs, self.metadata_log_dir}))


# Every key the engine interprets, with its field and Kafka's type (for Kafka-style errors).
_INT_KEYS: dict[str, tuple[str, int, int]] = {
    # key: (field, minimum, maximum)
    "controller.quorum.election.timeout.ms": ("controller_quorum_election_timeout_ms", 1, _INT_MAX),
    "controller.quorum.election.backoff.max.ms": ("controller_quorum_election_backoff_max_ms", 1, _INT_MAX),
    "controller.quorum.fetch.timeout.ms": ("controller_quorum_fetch_timeout_ms", 1, _INT_MAX),
    "controller.quorum.request.timeout.ms": ("controller_quorum_request_timeout_ms", 1, _INT_MAX),
    "controller.quorum.retry.backoff.ms": ("controller_quorum_retry_backoff_ms", 0, _INT_MAX),
    "controller.quorum.append.linger.ms": ("controller_quorum_append_linger_ms", 0, _INT_MAX),
    # KIP-1219 (Kafka 4.3): caps on what one Fetch / FetchSnapshot answer carries.
    "controller.quorum.fetch.max.bytes": ("controller_quorum_fetch_max_bytes", 1, _INT_MAX),
    "controller.quorum.fetch.snapshot.max.bytes": ("controller_quorum_fetch_snapshot_max_bytes", 1, _INT_MAX),
    "metadata.log.segment.bytes": ("metadata_log_segment_bytes", _LOG_OVERHEAD_BYTES, _INT_MAX),
    "internal.metadata.delete.delay.millis": ("internal_metadata_delete_delay_millis", 0, _LONG_MAX),
    "metadata.log.max.record.bytes.between.snapshots": (
        "metadata_log_max_record_bytes_between_snapshots",
        1,
        _LONG_MAX,
    ),
    "metadata.log.max.snapshot.interval.ms": ("metadata_log_max_snapshot_interval_ms", 0, _LONG_MAX),
    "metadata.max.retention.bytes": ("metadata_max_retention_bytes", -1, _LONG_MAX),
    "metadata.max.retention.ms": ("metadata_max_retention_ms", -1, _LONG_MAX),
    "broker.heartbeat.interval.ms": ("broker_heartbeat_interval_ms", 1, _INT_MAX),
    "broker.session.timeout.ms": ("broker_session_timeout_ms", 1, _INT_MAX),
    "socket.request.max.bytes": ("socket_request_max_bytes", 1, _INT_MAX),
    "connections.max.idle.ms": ("connections_max_idle_ms", -1, _LONG_MAX),
    "max.connections": ("max_connections", 1, _INT_MAX),
    "max.connections.per.ip": ("max_connections_per_ip", 0, _INT_MAX),
    "kraftwerk.metrics.port": ("kraftwerk_metrics_port", 0, 65535),
    "num.partitions": ("num_partitions", 1, _INT_MAX),
    "default.replication.factor": ("default_replication_factor", 1, _INT_MAX),
    "min.insync.replicas": ("min_insync_replicas", 1, _INT_MAX),
    "replica.lag.time.max.ms": ("replica_lag_time_max_ms", 0, _LONG_MAX),
    "replica.fetch.max.bytes": ("replica_fetch_max_bytes", 0, _INT_MAX),
    "replica.fetch.wait.max.ms": ("replica_fetch_wait_max_ms", 0, _INT_MAX),
    "replica.fetch.min.bytes": ("replica_fetch_min_bytes", 0, _INT_MAX),
    "replica.fetch.backoff.ms": ("replica_fetch_backoff_ms", 0, _INT_MAX),
    "replica.socket.timeout.ms": ("replica_socket_timeout_ms", -1, _INT_MAX),
    "num.replica.fetchers": ("num_replica_fetchers", 1, _INT_MAX),
    "leader.replication.throttled.rate": ("leader_replication_throttled_rate", 0, _LONG_MAX),
    "follower.replication.throttled.rate": ("follower_replication_throttled_rate", 0, _LONG_MAX),
    "replica.alter.log.dirs.io.max.bytes.per.second": ("replica_alter_log_dirs_io_max_bytes_per_second", 0, _LONG_MAX),
    "replication.quota.window.num": ("replication_quota_window_num", 1, _INT_MAX),
    "replication.quota.window.size.seconds": ("replication_quota_window_size_seconds", 1, _INT_MAX),
    "alter.log.dirs.replication.quota.window.num": ("alter_log_dirs_replication_quota_window_num", 1, _INT_MAX),
    "alter.log.dirs.replication.quota.window.size.seconds": (
        "alter_log_dirs_replication_quota_window_size_seconds", 1, _INT_MAX),
    "offsets.topic.replication.factor": ("offsets_topic_replication_factor", 1, 32767),
    "offsets.topic.num.partitions": ("offsets_topic_num_partitions", 1, _INT_MAX),
    "offsets.topic.segment.bytes": ("offsets_topic_segment_bytes", 1, _INT_MAX),
    "offsets.retention.minutes": ("offsets_retention_minutes", 1, _INT_MAX),
    "offsets.retention.check.interval.ms": ("offsets_retention_check_interval_ms", 1, _LONG_MAX),
    "offsets.commit.timeout.ms": ("offsets_commit_timeout_ms", 1, _INT_MAX),
    "offset.metadata.max.bytes": ("offset_metadata_max_bytes", 0, _INT_MAX),
    "group.initial.rebalance.delay.ms": ("group_initial_rebalance_delay_ms", 0, _INT_MAX),
    "group.min.session.timeout.ms": ("group_min_session_timeout_ms", 0, _INT_MAX),
    "group.max.session.timeout.ms": ("group_max_session_timeout_ms", 0, _INT_MAX),
    "group.max.size": ("group_max_size", 1, _INT_MAX),
    "message.max.bytes": ("message_max_bytes", 0, _INT_MAX),
    "max.request.partition.size.limit": ("max_request_partition_size_limit", 1, _INT_MAX),
    "log.segment.bytes": ("log_segment_bytes", 1024 * 1024, _INT_MAX),
    "log.retention.bytes": ("log_retention_bytes", -1, _LONG_MAX),
    "log.retention.check.interval.ms": ("log_retention_check_interval_ms", 1, _LONG_MAX),
    "log.cleaner.backoff.ms": ("log_cleaner_backoff_ms", 0, _LONG_MAX),
    "log.cleaner.delete.retention.ms": ("log_cleaner_delete_retention_ms", 0, _LONG_MAX),
    "log.cleaner.min.compaction.lag.ms": ("log_cleaner_min_compaction_lag_ms", 0, _LONG_MAX),
    "log.cleaner.max.compaction.lag.ms": ("log_cleaner_max_compaction_lag_ms", 1, _LONG_MAX),
    "log.segment.delete.delay.ms": ("log_segment_delete_delay_ms", 0, _LONG_MAX),
    "log.flush.interval.messages": ("log_flush_interval_messages", 1, _LONG_MAX),
    "replica.high.watermark.checkpoint.interval.ms": ("replica_high_watermark_checkpoint_interval_ms", 0, _LONG_MAX),
    "log.flush.offset.checkpoint.interval.ms": ("log_flush_offset_checkpoint_interval_ms", 0, _INT_MAX),
    "log.flush.start.offset.checkpoint.interval.ms": ("log_flush_start_offset_checkpoint_interval_ms", 0, _INT_MAX),
    "initial.broker.registration.timeout.ms": ("initial_broker_registration_timeout_ms", 0, _INT_MAX),
}
# log.retention.ms wins over .minutes, which wins over .hours (Kafka's logRetentionTimeMillis).
_RETENTION_KEYS = (("log.retention.ms", 1), ("log.retention.minutes", 60_000), ("log.retention.hours", 3_600_000))
# log.roll.ms wins over log.roll.hours, and the same for the jitter (Kafka's logRollTimeMillis).
_ROLL_KEYS = (("log.roll.ms", 1), ("log.roll.hours", 3_600_000))
_ROLL_JITTER_KEYS = (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", 3_600_000))
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
_BOOL_KEYS: dict[str, str] = {
    "log.cleaner.enable": "log_cleaner_enable",
    "controller.quorum.auto.join.enable": "controller_quorum_auto_join_enable",
    "unstable.feature.versions.enable": "unstable_feature_versions_enable",
    "kraftwerk.test.state.machine.enable": "kraftwerk_test_state_machine_enable",
    "unclean.leader.election.enable": "unclean_leader_election_enable",
    "auto.create.topics.enable": "auto_create_topics_enable",
}
# Read as structured values below; the node-wiring keys are shared with the operator, which owns them.
_STRUCTURED_KEYS = frozenset(
    {*NODE_WIRING_KEYS, *(key for key, _ in (*_RETENTION_KEYS, *_ROLL_KEYS, *_ROLL_JITTER_KEYS)),
     "max.connections.per.ip.overrides", "compression.type",
     *(levels.config_key for levels in COMPRESSION_LEVELS.values())}
)
# Read from `originals` by `server.authorization` (the authorizer's keys).
_AUTHORIZER_KEYS = ("authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found")
_KNOWN_KEYS = frozenset({*_INT_KEYS, *_BOOL_KEYS, *_STRUCTURED_KEYS, *_AUTHORIZER_KEYS})


def load_config(path: str | Path) -> KafkaConfig:
    """Read and validate a `server.properties` file; ConfigError names the file on any problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"Cannot read configuration file {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"Cannot read configuration file {path}: not UTF-8 text ({e.reason})") from None
    try:
        properties = parse_properties(text)
    except JavaPropertiesError as e:
        raise ConfigError(f"Cannot parse configuration file {path}: {e}") from None
    return parse_config(properties)


def parse_config(properties: Mapping[str, str]) -> KafkaConfig:
    """Validate raw key/value pairs the way Kafka's `KafkaConfig` does."""
    props = {k: v.strip() for k, v in properties.items()}
    values: dict[str, Any] = {
        "originals": dict(properties),
        "unknown_keys": tuple(sorted(k for k in props if k not in _KNOWN_KEYS and not is_security_key(k))),
    }
    for key, (field, low, high) in _INT_KEYS.items():
        if key in props:
            values[field] = _parse_int(key, props[key], low=low, high=high)
    for key, field in _BOOL_KEYS.items():
        if key in props:
            values[field] = _parse_bool(key, props[key])

    values["log_retention_ms"] = _retention_ms(props)
    values["log_roll_ms"] = _first_time_key(props, _ROLL_KEYS, low=1, default=7 * 24 * 3_600_000)
    values["log_roll_jitter_ms"] = _first_time_key(props, _ROLL_JITTER_KEYS, low=0, default=0)
    if "compression.type" in props:
        if props["compression.type"] not in COMPRESSION_TYPES:
            raise ConfigError(f"Invalid value {props['compression.type']} for configuration compression.type: "
                              f"String must be one of: {', '.join(COMPRESSION_TYPES)}")
        values["compression_type"] = props["compression.type"]
    for levels in COMPRESSION_LEVELS.values():
        # Read where a topic's batch is recompressed (its topic config over this broker's); checked here.
        if levels.config_key in props:
            level = _parse_int(levels.config_key, props[levels.config_key], low=-_INT_MAX - 1, high=_INT_MAX)
            problem = levels.problem(level)
            if problem is not None:
                raise ConfigError(f"Invalid value {props[levels.config_key]} for configuration {levels.config_key}: "
                                  f"{problem}")
    values["max_connections_per_ip_overrides"] = _parse_connection_overrides(
        props.get("max.connections.per.ip.overrides", "")
    )
    if props.get("broker.rack"):
        values["broker_rack"] = props["broker.rack"]
    roles = _parse_process_roles(props.get("process.roles", ""))
    values["process_roles"] = roles
    if "node.id" not in props or props["node.id"] == "":
        raise ConfigError("Missing required configuration `node.id` which has no default value.")
    values["node_id"] = _parse_int("node.id", props["node.id"], low=0, high=_INT_MAX)

    controller_names = tuple(_csv(props.get("controller.listener.names", "")))
    values["controller_listener_names"] = controller_names
    protocol_map = _security_protocol_map(props, controller_names)
    values["listener_security_protocol_map"] = protocol_map
    listeners = _parse_listeners(
        "listeners", props.get("listeners", _DEFAULT_LISTENERS), protocol_map, require_distinct_ports=True
    )
    values["listeners"] = listeners
    if "advertised.listeners" in props:
        values["advertised_listeners"] = _parse_listeners(
            "advertised.listeners", props["advertised.listeners"], protocol_map, require_distinct_ports=False
        )
    else:
        values["advertised_listeners"] = listeners
    values["inter_broker_listener_name"] = _inter_broker_listener_name(props)
    values["controller_quorum_voters"] = parse_quorum_voters(props.get("controller.quorum.voters", ""))
    values["controller_quorum_bootstrap_servers"] = _parse_bootstrap_servers(
        props.get("controller.quorum.bootstrap.servers", "")
    )

    if props.get("log.dirs"):
        log_dirs = tuple(_csv(props["log.dirs"]))
    else:
        log_dirs = tuple(_csv(props.get("log.dir", _DEFAULT_LOG_DIR)))
    if not log_dirs:
        raise ConfigError("At least one log directory must be defined via log.dirs or log.dir.")
    values["log_dirs"] = log_dirs
    values["metadata_log_dir"] = props.get("metadata.log.dir") or log_dirs[0]

    try:
        config = KafkaConfig(**values)
    except ValidationError as e:  # our parsing above already produced the right types
        raise ConfigError(str(e)) from None
    _validate(config)
    if config.unknown_keys:
        # Kafka's AbstractConfig.logUnused says the same, and carries on.
        _log.warning("These configurations '%s' were supplied but are not used yet.", list(config.unknown_keys))
    return config


def parse_quorum_voters(text: str) -> tuple[QuorumVoter, ...]:
    """Parse `controller.quorum.voters` (`id@host:port,...`) with Kafka's error messages."""
    voters: list[QuorumVoter] = []
    for entry in _csv(text):
        id_and_address = entry.split("@")
        if len(id_and_address) != 2:
            raise ConfigError(
                f"Invalid configuration value for controller.quorum.voters. Expected entry {entry!r} "
                "to be of the form {id}@{host}:{port}"
            )
        id_text, address = id_and_address
        try:
            voter_id = int(id_text)
        except ValueError:
            raise ConfigError(
                f"Invalid configuration value for controller.quorum.voters: "
                f"failed to parse voter ID as an integer from {id_text!r}"
            ) from None
        host, port = _split_host_port("controller.quorum.voters", entry, address)
        if any(v.voter_id == voter_id for v in voters):
            raise ConfigError(f"Invalid configuration value for controller.quorum.voters: voter id {voter_id} appears twice")
        voters.append(QuorumVoter(voter_id=voter_id, host=host, port=port))
    return tuple(voters)


def _parse_connection_overrides(text: str) -> dict[str, int]:
    """`max.connections.per.ip.overrides`: "host:count,..." as Kafka's Csv.parseCsvMap reads it
    (the count follows the last colon, so an IPv6 address needs no brackets)."""
    overrides: dict[str, int] = {}
    key = "max.connections.per.ip.overrides"
    for entry in re.split(r"\s*,\s*", text.strip()) if text.strip() else ():
        host, colon, count = entry.rpartition(":")
        if not colon or not host.strip():
            raise ConfigError(f"Error parsing configuration property '{key}': {entry!r} is not host:count")
        overrides[host.strip()] = _parse_int(key, count.strip(), low=0, high=_INT_MAX)
    return overrides


def _validate(config: KafkaConfig) -> None:
    """The cross-key rules of Kafka's `KafkaConfig.validateValues` for KRaft nodes."""
    if config.max_connections_per_ip == 0 and not config.max_connections_per_ip_overrides:
        raise ConfigError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                          "property is set.")
    voter_ids = {v.voter_id for v in config.controller_quorum_voters}
    if not voter_ids and not config.controller_quorum_bootstrap_servers:
        raise ConfigError(
            "If using process.roles, either controller.quorum.bootstrap.servers must contain the set of "
            "bootstrap controllers or controller.quorum.voters must contain a parseable set of controllers."
        )
    listener_names = {e.listener_name for e in config.listeners}
    if config.process_roles == {ProcessRole.BROKER}:
        if config.node_id in voter_ids:
            raise ConfigError(
                f"node.id: if process.roles contains just the 'broker' role, the node id {config.node_id} must "
                f"not be included in the set of voters controller.quorum.voters={sorted(voter_ids)}"
            )
        if not config.controller_listener_names:
            raise ConfigError(
                "controller.listener.names must contain at least one value when running KRaft with just the "
                "broker role"
            )
        if config.controller_listeners:
            raise ConfigError(
                "controller.listener.names must not contain a value appearing in the 'listeners' configuration "
                "when running KRaft with just the broker role"
            )
        for name in config.controller_listener_names:
            if name not in config.listener_security_protocol_map:
                raise ConfigError(
                    f"Controller listener with name {name} defined in controller.listener.names not found in "
                    "listener.security.protocol.map (an explicit security mapping for each controller listener "
                    "is required if listener.security.protocol.map is non-empty, or if there are security "
                    "protocols other than PLAINTEXT in use)"
                )
    if config.is_controller:
        if not config.controller_listener_names:
            raise ConfigError(
                "controller.listener.names must contain at least one value appearing in the 'listeners' "
                "configuration when running the KRaft controller role"
            )
        if config.process_roles == {ProcessRole.CONTROLLER} and len(config.controller_listeners) != len(
            config.listeners
        ):
            raise ConfigError(
                "The listeners config must only contain KRaft controller listeners from "
                "controller.listener.names when process.roles=controller"
            )
        if voter_ids and config.node_id not in voter_ids:
            raise ConfigError(
                f"node.id: if process.roles contains the 'controller' role, the node id {config.node_id} must be "
                f"included in the set of voters controller.quorum.voters={sorted(voter_ids)}"
            )
        if not config.effective_advertised_controller_listeners:
            raise ConfigError(
                "controller.listener.names must contain at least one value appearing in the 'listeners' "
                "configuration when running the KRaft controller role"
            )
        if not all(name in listener_names for name in config.controller_listener_names):
            raise ConfigError(
                "controller.listener.names must only contain values appearing in the 'listeners' "
                "configuration when running the KRaft controller role"
            )
    if config.is_broker:
        advertised_names = {e.listener_name for e in config.effective_advertised_broker_listeners}
        if not advertised_names:
            raise ConfigError(
                "advertised.listeners: there must be at least one broker advertised listener. "
                "Perhaps all listeners appear in controller.listener.names?"
            )
        if config.inter_broker_listener_name not in advertised_names:
            raise ConfigError(
                "inter.broker.listener.name must be a listener name defined in advertised.listeners. The valid "
                f"options based on currently configured listeners are {','.join(sorted(advertised_names))}"
            )
        if not advertised_names <= listener_names:
            raise ConfigError(
                "advertised.listeners listener names must be equal to or a subset of the ones defined in "
                f"listeners. Found {','.join(sorted(advertised_names))}. The valid options based on the current "
                f"configuration are {','.join(sorted(listener_names))}"
            )
    advertised = (*config.effective_advertised_broker_listeners, *config.effective_advertised_controller_listeners)
    if any(e.host == "0.0.0.0" for e in advertised):
        raise ConfigError(
            "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address."
        )
    if config.is_broker:
        # Kafka's ReplicationConfigs rules.
        if config.replica_fetch_wait_max_ms > config.replica_socket_timeout_ms >= 0:
            raise ConfigError(
                "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms to prevent "
                "unnecessary socket timeouts"
            )
        if config.replica_fetch_wait_max_ms > config.replica_lag_time_max_ms:
            raise ConfigError(
                "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms to "
                "prevent frequent changes in ISR"
            )
    if config.broker_heartbeat_interval_ms >= config.broker_session_timeout_ms:
        # Kafka does not check this, but a broker configured this way is fenced between heartbeats.
        raise ConfigError(
            f"broker.heartbeat.interval.ms ({config.broker_heartbeat_interval_ms}) must be less than "
            f"broker.session.timeout.ms ({config.broker_session_timeout_ms})"
        )


def _retention_ms(props: Mapping[str, str]) -> int:
    for key, unit_ms in _RETENTION_KEYS:
        if props.get(key):
            value = _parse_int(key, props[key], low=-(2**31), high=_LONG_MAX // unit_ms) * unit_ms
            if value == 0:
                # Kafka: "log.retention.ms must be unlimited (-1) or, equal or greater than 1"
                raise ConfigError(f"{key} must be unlimited (-1) or, equal or greater than 1")
            return -1 if value < 0 else value
    return _DEFAULT_RETENTION_MS


def _first_time_key(props: Mapping[str, str], keys: tuple[tuple[str, int], ...], *, low: int, default: int) -> int:
    """The first of `keys` (finest unit first) that is set, in ms."""
    for key, unit_ms in keys:
        if props.get(key):
            return _parse_int(key, props[key], low=low, high=_LONG_MAX // unit_ms) * unit_ms
    return default


def _csv(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _parse_int(key: str, text: str, *, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"Invalid value {text} for configuration {key}: Not a number") from None
    if value < low:
        raise ConfigError(f"Invalid value {text} for configuration {key}: Value must be at least {low}")
    if value > high:
        raise ConfigError(f"Invalid value {text} for configuration {key}: Value must be no more than {high}")
    return value


def _parse_bool(key: str, text: str) -> bool:
    lowered = text.lower()
    if lowered not in ("true", "false"):
        raise ConfigError(f"Invalid value {text} for configuration {key}: Expected value to be either true or false")
    return lowered == "true"


def _parse_process_roles(text: str) -> frozenset[ProcessRole]:
    names = _csv(text)
    if not names:
        raise ConfigError(
            "Missing required configuration `process.roles`: this engine runs KRaft only, so each node must be "
            "a broker, a controller, or both (process.roles=broker,controller)"
        )
    roles: set[ProcessRole] = set()
    for name in names:
        try:
            role = ProcessRole(name)
        except ValueError:
            raise ConfigError(
                f"Invalid value {text} for configuration process.roles: String must be one of: broker, controller"
            ) from None
        if role in roles:
            raise ConfigError(f"Invalid value {text} for configuration process.roles: Duplicate role names found")
        roles.add(role)
    return frozenset(roles)


def _security_protocol_map(props: Mapping[str, str], controller_names: tuple[str, ...]) -> dict[str, str]:
    explicit = "listener.security.protocol.map" in props
    text = props.get("listener.security.protocol.map", _DEFAULT_SECURITY_PROTOCOL_MAP)
    mapping: dict[str, str] = {}
    for entry in _csv(text):
        name, sep, protocol = entry.partition(":")
        if not sep or not name.strip() or not protocol.strip():
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: "
                f"entry {entry!r} is not of the form LISTENER_NAME:SECURITY_PROTOCOL"
            )
        protocol = protocol.strip().upper()
        if protocol not in _SECURITY_PROTOCOLS:
            raise ConfigError(
                f"Invalid value {text} for configuration listener.security.protocol.map: unknown security "
                f"protocol {protocol} (known: {', '.join(_SECURITY_PROTOCOLS)})"
            )
        mapping[name.strip().upper()] = protocol
    if not explicit:
        # Like Kafka: with the default map, controller listeners get PLAINTEXT unless SSL/SASL is in use.
        listener_names = [_listener_name_of(v) for v in _csv(props.get("listeners", _DEFAULT_LISTENERS))]
        if not any(n in _SECURITY_PROTOCOLS[1:] for n in (*controller_names, *listener_names)):
            for name in controller_names:
                mapping.setdefault(name.upper(), "PLAINTEXT")
    return mapping


def _listener_name_of(text: str) -> str:
    return text.partition("://")[0].strip().upper()


def _parse_listeners(
    key: str, text: str, protocol_map: Mapping[str, str], *, require_distinct_ports: bool
) -> tuple[Endpoint, ...]:
    endpoints: list[Endpoint] = []
    for entry in _csv(text):
        m = _ENDPOINT_RE.match(entry)
        if m is None:
            raise ConfigError(f"Invalid value {text} for configuration {key}: Unable to parse {entry} to a broker endpoint")
        name, host, port_text = m.group(1).upper(), m.group(2), m.group(3)
        port = int(port_text)
        if not 0 <= port <= 65535:
            raise ConfigError(f"Invalid value {text} for configuration {key}: port {port} of {entry} is out of range")
        if name not in protocol_map:
            raise ConfigError(
                f"Invalid value {text} for configuration {key}: No security protocol defined for listener {name} "
                "(add it to listener.security.protocol.map)"
            )
        endpoints.append(
            Endpoint(listener_name=name, host=host, port=port, security_protocol=protocol_map[name])
        )
    names = [e.listener_name for e in endpoints]
    if len(set(names)) != len(names):
        raise ConfigError(f"Invalid value {text} for configuration {key}: Each listener must have a different name")
    ports = [e.port for e in endpoints if e.port != 0]
    if require_distinct_ports and len(set(ports)) != len(ports):
        raise ConfigError(f"Invalid value {text} for configuration {key}: Each listener must have a different port")
    return tuple(endpoints)


def _inter_broker_listener_name(props: Mapping[str, str]) -> str:
    name = props.get("inter.broker.listener.name")
    protocol = props.get("security.inter.broker.protocol")
    if name and protocol:
        raise ConfigError(
            "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set."
        )
    return (name or protocol or "PLAINTEXT").upper()


def _parse_bootstrap_servers(text: str) -> tuple[HostPort, ...]:
    return tuple(
        HostPort(host=host, port=port)
        for host, port in (
            _split_host_port("controller.quorum.bootstrap.servers", entry, entry) for entry in _csv(text)
        )
    )


def _split_host_port(key: str, entry: str, address: str) -> tuple[str, int]:
    host, sep, port_text = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host:
        raise ConfigError(f"Invalid configuration value for {key}: failed to parse host name from entry {entry!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"Invalid configuration value for {key}: failed to parse host port from entry {entry!r}") from None
    if not 0 < port <= 65535:
        raise ConfigError(f"Invalid configuration value for {key}: port {port} of entry {entry!r} is out of range")
    return host, port
