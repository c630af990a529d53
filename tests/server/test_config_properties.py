"""server.properties: Kafka's keys and defaults load, and every broken combination Kafka refuses
is refused with an error that names the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.server.config import (
    ConfigError,
    Endpoint,
    HostPort,
    ProcessRole,
    QuorumVoter,
    load_config,
    parse_config,
    parse_quorum_voters,
)

CONTROLLER = {
    "process.roles": "controller",
    "node.id": "1",
    "listeners": "CONTROLLER://localhost:9093",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.voters": "1@localhost:9093",
    "log.dirs": "/var/kafka/data",
}
BROKER = {
    "process.roles": "broker",
    "node.id": "4",
    "listeners": "PLAINTEXT://localhost:9092",
    "controller.listener.names": "CONTROLLER",
    "controller.quorum.bootstrap.servers": "localhost:9093",
    "log.dirs": "/var/kafka/a,/var/kafka/b",
}


def with_(base: dict[str, str], **changes: str | None) -> dict[str, str]:
    props = dict(base)
    for key, value in changes.items():
        kafka_key = key.replace("_", ".")
        if value is None:
            props.pop(kafka_key, None)
        else:
            props[kafka_key] = value
    return props


def refused(props: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as excinfo:
        parse_config(props)
    return str(excinfo.value)


def test_kafka_defaults_apply_when_keys_are_absent() -> None:
    config = parse_config(CONTROLLER)
    assert config.controller_quorum_election_timeout_ms == 1000
    assert config.controller_quorum_election_backoff_max_ms == 1000
    assert config.controller_quorum_fetch_timeout_ms == 2000
    assert config.controller_quorum_request_timeout_ms == 2000
    assert config.controller_quorum_retry_backoff_ms == 20
    assert config.controller_quorum_append_linger_ms == 25
    assert config.controller_quorum_auto_join_enable is False
    assert config.controller_quorum_fetch_max_bytes == 1048576
    assert config.controller_quorum_fetch_snapshot_max_bytes == 1048576
    assert config.metadata_log_segment_bytes == 1024 * 1024 * 1024
    assert config.metadata_log_max_record_bytes_between_snapshots == 20971520
    assert config.metadata_log_max_snapshot_interval_ms == 3600000
    assert config.metadata_max_retention_bytes == 104857600
    assert config.metadata_max_retention_ms == 604800000
    assert config.broker_heartbeat_interval_ms == 2000
    assert config.broker_session_timeout_ms == 9000
    assert config.socket_request_max_bytes == 104857600
    assert config.connections_max_idle_ms == 600000
    assert config.unstable_feature_versions_enable is False
    assert config.kraftwerk_metrics_port == 0


def test_every_interpreted_key_is_read() -> None:
    config = parse_config(
        with_(
            CONTROLLER,
            controller_quorum_election_timeout_ms="1500",
            controller_quorum_election_backoff_max_ms="900",
            controller_quorum_fetch_timeout_ms="3000",
            controller_quorum_request_timeout_ms="2500",
            controller_quorum_retry_backoff_ms="50",
            controller_quorum_append_linger_ms="5",
            controller_quorum_auto_join_enable="TRUE",
            metadata_log_segment_bytes="8388608",
            metadata_log_max_record_bytes_between_snapshots="1000",
            metadata_log_max_snapshot_interval_ms="0",
            metadata_max_retention_bytes="-1",
            metadata_max_retention_ms="-1",
            broker_heartbeat_interval_ms="500",
            broker_session_timeout_ms="3000",
            socket_request_max_bytes="1000000",
            connections_max_idle_ms="1000",
            unstable_feature_versions_enable="true",
            kraftwerk_metrics_port="9404",
            metadata_log_dir="/var/kafka/meta",
        )
    )
    assert config.controller_quorum_election_timeout_ms == 1500
    assert config.controller_quorum_election_backoff_max_ms == 900
    assert config.controller_quorum_fetch_timeout_ms == 3000
    assert config.controller_quorum_request_timeout_ms == 2500
    assert config.controller_quorum_retry_backoff_ms == 50
    assert config.controller_quorum_append_linger_ms == 5
    assert config.controller_quorum_auto_join_enable is True
    assert config.metadata_log_segment_bytes == 8388608
    assert config.metadata_log_max_record_bytes_between_snapshots == 1000
    assert config.metadata_log_max_snapshot_interval_ms == 0
    assert config.metadata_max_retention_bytes == -1
    assert config.metadata_max_retention_ms == -1
    assert config.broker_heartbeat_interval_ms == 500
    assert config.broker_session_timeout_ms == 3000
    assert config.socket_request_max_bytes == 1000000
    assert config.connections_max_idle_ms == 1000
    assert config.unstable_feature_versions_enable is True
    assert config.kraftwerk_metrics_port == 9404
    assert config.metadata_log_dir == "/var/kafka/meta"
    assert config.all_log_dirs == ("/var/kafka/data", "/var/kafka/meta")


def test_the_quorum_keys_reach_the_raft_core() -> None:
    config = parse_config(
        with_(
            CONTROLLER,
            controller_quorum_election_timeout_ms="1500",
            controller_quorum_fetch_timeout_ms="3000",
            controller_quorum_append_linger_ms="5",
            controller_quorum_auto_join_enable="true",
            metadata_max_retention_bytes="1048576",
            metadata_max_retention_ms="3600000",
            controller_quorum_fetch_max_bytes="65536",
            controller_quorum_fetch_snapshot_max_bytes="131072",
        )
    )
    raft = config.raft_config()
    assert (raft.election_timeout_ms, raft.fetch_timeout_ms, raft.append_linger_ms) == (1500, 3000, 5)
    assert (raft.election_backoff_max_ms, raft.request_timeout_ms, raft.retry_backoff_ms) == (1000, 2000, 20)
    assert raft.auto_join_enable is True
    assert raft.retention_max_bytes == 1048576
    assert raft.retention_max_ms == 3600000
    assert (raft.fetch_max_bytes, raft.fetch_snapshot_max_bytes) == (65536, 131072)
    assert raft.controller_listener_name == "CONTROLLER"


def test_kafka_defaults_reach_the_raft_core_unchanged() -> None:
    from kraft_engine.raft import RaftConfig

    raft = parse_config(CONTROLLER).raft_config()
    defaults = RaftConfig()
    for field in ("fetch_max_bytes", "fetch_snapshot_max_bytes", "retention_max_bytes", "retention_max_ms", "fetch_max_wait_ms"):
        assert getattr(raft, field) == getattr(defaults, field), field
    # Unlimited retention (-1) passes through as unlimited.
    unlimited = parse_config(with_(CONTROLLER, metadata_max_retention_ms="-1", metadata_max_retention_bytes="-1")).raft_config()
    assert (unlimited.retention_max_ms, unlimited.retention_max_bytes) == (-1, -1)


def test_controller_structure_is_parsed() -> None:
    config = parse_config(
        with_(CONTROLLER, controller_quorum_voters="1@localhost:9093, 2@[::1]:9094,3@ctl-3.example:9095")
    )
    assert config.process_roles == {ProcessRole.CONTROLLER}
    assert config.is_controller and not config.is_broker
    assert config.node_id == 1
    assert config.listeners == (
        Endpoint(listener_name="CONTROLLER", host="localhost", port=9093, security_protocol="PLAINTEXT"),
    )
    assert config.controller_quorum_voters == (
        QuorumVoter(voter_id=1, host="localhost", port=9093),
        QuorumVoter(voter_id=2, host="::1", port=9094),
        QuorumVoter(voter_id=3, host="ctl-3.example", port=9095),
    )
    # The controller listener got PLAINTEXT from the default map, as in Kafka.
    assert config.listener_security_protocol_map["CONTROLLER"] == "PLAINTEXT"
    assert config.metadata_log_dir == "/var/kafka/data"


def test_broker_structure_and_bootstrap_servers() -> None:
    config = parse_config(BROKER)
    assert config.process_roles == {ProcessRole.BROKER}
    assert config.controller_quorum_voters == ()
    assert config.controller_quorum_bootstrap_servers == (HostPort(host="localhost", port=9093),)
    assert config.log_dirs == ("/var/kafka/a", "/var/kafka/b")
    assert config.metadata_log_dir == "/var/kafka/a"  # the first log dir, like Kafka
    assert config.inter_broker_listener_name == "PLAINTEXT"


def test_combined_node_with_advertised_listeners() -> None:
    config = parse_config(
        {
            "process.roles": "broker,controller",
            "node.id": "1",
            "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
            "advertised.listeners": "PLAINTEXT://b1.example:9092,CONTROLLER://c1.example:9093",
            "controller.listener.names": "CONTROLLER",
            "controller.quorum.bootstrap.servers": "c1.example:9093",
        }
    )
    assert config.process_roles == {ProcessRole.BROKER, ProcessRole.CONTROLLER}
    assert [e.host for e in config.effective_advertised_controller_listeners] == ["c1.example"]
    assert [e.host for e in config.effective_advertised_broker_listeners] == ["b1.example"]
    assert config.log_dirs == ("/tmp/kafka-logs",)  # log.dir's default


def test_advertised_controller_listener_falls_back_to_the_bound_one() -> None:
    config = parse_config(CONTROLLER)
    assert config.effective_advertised_controller_listeners == config.listeners


def test_log_dir_is_used_when_log_dirs_is_absent() -> None:
    config = parse_config(with_(CONTROLLER, log_dirs=None, log_dir="/data/one"))
    assert config.log_dirs == ("/data/one",)


def test_unknown_keys_are_kept_and_warned_about_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    config = parse_config(with_(CONTROLLER, num_network_threads="3", **{"my-custom-key": "x"}))
    assert config.unknown_keys == ("my-custom-key", "num.network.threads")
    assert config.originals["num.network.threads"] == "3"
    assert "These configurations '['my-custom-key', 'num.network.threads']' were supplied but are not used yet" in caplog.text


def test_load_config_reads_java_properties_syntax(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\n"
        "process.roles = controller\n"
        "node.id: 1\n"
        "listeners=CONTROLLER://localhost:9093\n"
        "controller.listener.names=CONTROLLER\n"
        "controller.quorum.voters=1@localhost:9093,\\\n"
        "    2@localhost:9094\n"
        f"log.dirs={tmp_path}/logs\n"
    )
    config = load_config(path)
    assert [v.voter_id for v in config.controller_quorum_voters] == [1, 2]
    assert config.log_dirs == (f"{tmp_path}/logs",)


def test_a_malformed_escape_is_refused_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text("process.roles=controller\nnode.id=1\nlog.dirs=/data/\\uZZZZ\n")
    with pytest.raises(ConfigError) as excinfo:
        load_config(path)
    message = str(excinfo.value)
    assert str(path) in message
    assert "malformed \\uxxxx encoding in the value of log.dirs" in message


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="Cannot read configuration file"):
        load_config(tmp_path / "nope.properties")


# --- refusals, one per rule -------------------------------------------------------------------


def test_node_id_is_required() -> None:
    assert "node.id" in refused(with_(CONTROLLER, node_id=None))


def test_node_id_must_be_a_non_negative_int() -> None:
    assert "Invalid value x for configuration node.id" in refused(with_(CONTROLLER, node_id="x"))
    assert "node.id" in refused(with_(CONTROLLER, node_id="-1"))


def test_process_roles_is_required_and_checked() -> None:
    assert "process.roles" in refused(with_(CONTROLLER, process_roles=None))
    assert "must be one of: broker, controller" in refused(with_(CONTROLLER, process_roles="zookeeper"))
    assert "Duplicate" in refused(with_(CONTROLLER, process_roles="controller,controller"))


def test_a_controller_needs_controller_listener_names() -> None:
    props = with_(
        CONTROLLER, controller_listener_names=None, listener_security_protocol_map="CONTROLLER:PLAINTEXT"
    )
    assert "controller.listener.names must contain at least one value" in refused(props)


def test_a_controller_listener_name_must_be_one_of_the_listeners() -> None:
    props = with_(
        CONTROLLER,
        process_roles="broker,controller",
        listeners="PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
        controller_listener_names="CONTROLLER,OTHER",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,OTHER:PLAINTEXT",
    )
    assert "must only contain values appearing in the 'listeners'" in refused(props)


def test_a_controllers_listeners_must_include_the_controller_listener() -> None:
    message = refused(with_(CONTROLLER, listeners="PLAINTEXT://localhost:9092"))
    assert "controller.listener.names" in message


def test_a_controller_only_node_has_only_controller_listeners() -> None:
    message = refused(with_(CONTROLLER, listeners="CONTROLLER://localhost:9093,PLAINTEXT://localhost:9092"))
    assert "must only contain KRaft controller listeners" in message


def test_a_controller_must_be_one_of_the_static_voters() -> None:
    message = refused(with_(CONTROLLER, controller_quorum_voters="2@localhost:9093"))
    assert "node id 1 must be included in the set of voters controller.quorum.voters" in message


def test_a_broker_must_not_be_a_voter() -> None:
    message = refused(with_(BROKER, controller_quorum_voters="4@localhost:9093"))
    assert "must not be included in the set of voters" in message


def test_a_broker_needs_controller_listener_names_that_are_not_its_listeners() -> None:
    assert "controller.listener.names" in refused(with_(BROKER, controller_listener_names=None))
    both = with_(BROKER, listeners="PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093")
    assert "must not contain a value appearing in the 'listeners'" in refused(both)


def test_a_brokers_controller_listener_must_have_a_security_protocol() -> None:
    props = with_(BROKER, listener_security_protocol_map="PLAINTEXT:PLAINTEXT")
    assert "not found in listener.security.protocol.map" in refused(props)


def test_quorum_voters_or_bootstrap_servers_are_required() -> None:
    message = refused(with_(CONTROLLER, controller_quorum_voters=None))
    assert "controller.quorum.bootstrap.servers" in message and "controller.quorum.voters" in message


def test_listener_names_must_be_in_the_security_protocol_map() -> None:
    props = with_(BROKER, listeners="INTERNAL://localhost:9092")
    assert "No security protocol defined for listener INTERNAL" in refused(props)


def test_listeners_must_parse_and_be_distinct() -> None:
    assert "Unable to parse" in refused(with_(BROKER, listeners="localhost:9092"))
    assert "different name" in refused(with_(BROKER, listeners="PLAINTEXT://a:9092,PLAINTEXT://b:9093"))
    props = with_(BROKER, listeners="PLAINTEXT://a:9092,SSL://b:9092")
    assert "different port" in refused(props)


def test_inter_broker_listener_must_be_advertised() -> None:
    message = refused(with_(BROKER, inter_broker_listener_name="SSL"))
    assert "inter.broker.listener.name must be a listener name defined in advertised.listeners" in message


def test_advertised_listeners_must_be_bound() -> None:
    props = with_(BROKER, advertised_listeners="PLAINTEXT://b:9092,SSL://b:9094")
    assert "advertised.listeners listener names must be equal to or a subset" in refused(props)


def test_advertised_listeners_cannot_be_the_wildcard_address() -> None:
    props = with_(BROKER, listeners="PLAINTEXT://0.0.0.0:9092")
    assert "nonroutable meta-address 0.0.0.0" in refused(props)


def test_malformed_quorum_voters_are_refused() -> None:
    assert "{id}@{host}:{port}" in refused(with_(CONTROLLER, controller_quorum_voters="localhost:9093"))
    assert "voter ID" in refused(with_(CONTROLLER, controller_quorum_voters="one@localhost:9093"))
    assert "host port" in refused(with_(CONTROLLER, controller_quorum_voters="1@localhost:x"))
    assert "appears twice" in refused(
        with_(CONTROLLER, controller_quorum_voters="1@localhost:9093,1@localhost:9094")
    )


def test_malformed_bootstrap_servers_are_refused() -> None:
    message = refused(with_(BROKER, controller_quorum_bootstrap_servers="localhost"))
    assert "controller.quorum.bootstrap.servers" in message


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("controller.quorum.election.timeout.ms", "soon", "Not a number"),
        ("controller.quorum.fetch.timeout.ms", "0", "at least 1"),
        ("controller.quorum.election.timeout.ms", "-5", "at least 1"),
        ("controller.quorum.retry.backoff.ms", "-1", "at least 0"),
        ("metadata.log.segment.bytes", "4", "at least 12"),
        ("broker.session.timeout.ms", "99999999999", "no more than"),
        ("kraftwerk.metrics.port", "70000", "no more than 65535"),
        ("unstable.feature.versions.enable", "yes", "true or false"),
        ("controller.quorum.auto.join.enable", "1", "true or false"),
        ("controller.quorum.fetch.max.bytes", "0", "at least 1"),
        ("controller.quorum.fetch.snapshot.max.bytes", "-1", "at least 1"),
    ],
)
def test_bad_values_name_the_key_and_reason(key: str, value: str, reason: str) -> None:
    message = refused({**CONTROLLER, key: value})
    assert f"Invalid value {value} for configuration {key}" in message
    assert reason in message


def test_heartbeat_must_be_shorter_than_session_timeout() -> None:
    message = refused(with_(BROKER, broker_heartbeat_interval_ms="9000"))
    assert "broker.heartbeat.interval.ms" in message and "broker.session.timeout.ms" in message


def test_both_inter_broker_keys_are_refused() -> None:
    props = with_(BROKER, inter_broker_listener_name="PLAINTEXT", security_inter_broker_protocol="PLAINTEXT")
    assert "Only one of inter.broker.listener.name and security.inter.broker.protocol" in refused(props)


def test_parse_quorum_voters_of_an_empty_string_is_empty() -> None:
    assert parse_quorum_voters("") == ()
    assert parse_quorum_voters(" , ") == ()


def test_broker_keys_have_kafkas_defaults() -> None:
    config = parse_config(BROKER)
    assert config.num_partitions == 1
    assert config.default_replication_factor == 1
    assert config.min_insync_replicas == 1
    assert config.replica_lag_time_max_ms == 30000
    assert config.replica_fetch_max_bytes == 1048576
    assert config.replica_fetch_wait_max_ms == 500
    assert config.unclean_leader_election_enable is False
    assert config.offsets_topic_replication_factor == 3
    assert config.log_segment_bytes == 1073741824
    assert config.log_retention_ms == 168 * 3600 * 1000
    assert config.log_retention_bytes == -1
    assert config.message_max_bytes == 1048588
    assert config.broker_rack is None
    assert config.log_segment_delete_delay_ms == 60000
    assert config.log_cleaner_min_compaction_lag_ms == 0
    assert config.log_cleaner_max_compaction_lag_ms == 2**63 - 1
    assert (config.replica_high_watermark_checkpoint_interval_ms, config.log_flush_offset_checkpoint_interval_ms,
            config.log_flush_start_offset_checkpoint_interval_ms) == (5000, 60000, 60000)
    assert config.internal_metadata_delete_delay_millis == 60000
    assert config.unknown_keys == ()


def test_broker_keys_are_read() -> None:
    config = parse_config(with_(BROKER, **{
        "num.partitions": "6", "default.replication.factor": "3", "min.insync.replicas": "2",
        "replica.lag.time.max.ms": "10000", "unclean.leader.election.enable": "true",
        "offsets.topic.replication.factor": "1", "log.retention.bytes": "1000000", "broker.rack": "rack-a",
        "log.segment.bytes": "2097152", "replica.high.watermark.checkpoint.interval.ms": "1000",
        "log.flush.offset.checkpoint.interval.ms": "0", "log.flush.start.offset.checkpoint.interval.ms": "7000",
        "log.cleaner.max.compaction.lag.ms": "3600000", "internal.metadata.delete.delay.millis": "0",
    }))
    assert (config.num_partitions, config.default_replication_factor, config.min_insync_replicas) == (6, 3, 2)
    assert config.replica_lag_time_max_ms == 10000
    assert config.unclean_leader_election_enable is True
    assert config.offsets_topic_replication_factor == 1
    assert config.log_retention_bytes == 1000000
    assert config.broker_rack == "rack-a"
    assert config.log_segment_bytes == 2097152
    assert (config.replica_high_watermark_checkpoint_interval_ms, config.log_flush_offset_checkpoint_interval_ms,
            config.log_flush_start_offset_checkpoint_interval_ms) == (1000, 0, 7000)
    assert (config.log_cleaner_max_compaction_lag_ms, config.internal_metadata_delete_delay_millis) == (3600000, 0)
    assert config.unknown_keys == ()


def test_log_retention_ms_wins_over_minutes_and_hours() -> None:
    assert parse_config(with_(BROKER, **{"log.retention.hours": "1"})).log_retention_ms == 3600000
    assert parse_config(with_(BROKER, **{"log.retention.hours": "1", "log.retention.minutes": "2"})).log_retention_ms == 120000
    assert parse_config(with_(BROKER, **{"log.retention.minutes": "2", "log.retention.ms": "5"})).log_retention_ms == 5
    assert parse_config(with_(BROKER, **{"log.retention.ms": "-1"})).log_retention_ms == -1
    assert "log.retention.ms must be unlimited (-1)" in refused(with_(BROKER, **{"log.retention.ms": "0"}))


def test_log_roll_ms_wins_over_hours_and_compression_type_is_one_of_kafkas() -> None:
    config = parse_config(BROKER)
    assert (config.log_roll_ms, config.log_roll_jitter_ms, config.compression_type) == (168 * 3600000, 0, "producer")
    assert parse_config(with_(BROKER, **{"log.roll.hours": "2"})).log_roll_ms == 7200000
    assert parse_config(with_(BROKER, **{"log.roll.hours": "2", "log.roll.ms": "500"})).log_roll_ms == 500
    assert parse_config(with_(BROKER, **{"log.roll.jitter.hours": "1"})).log_roll_jitter_ms == 3600000
    assert parse_config(with_(BROKER, **{"compression.type": "zstd"})).compression_type == "zstd"
    # KIP-390's levels: Kafka's whole ranges are accepted (gzip's -1 is Deflater's default).
    for key, value in (("compression.gzip.level", "-1"), ("compression.gzip.level", "9"), ("compression.lz4.level", "1"),
                       ("compression.lz4.level", "17"), ("compression.zstd.level", "-131072"),
                       ("compression.zstd.level", "22")):
        assert parse_config(with_(BROKER, **{key: value})).unknown_keys == ()


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("log.roll.ms", "0", "Value must be at least 1"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("default.replication.factor", "x", "Not a number"),
        ("offsets.topic.replication.factor", "0", "Value must be at least 1"),
        ("log.segment.bytes", "1000", "Value must be at least 1048576"),
        ("unclean.leader.election.enable", "yes", "either true or false"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("compression.zstd.level", "-131073", "Value must be at least -131072"),
        ("compression.zstd.level", "high", "Not a number"),
        ("log.segment.delete.delay.ms", "-1", "Value must be at least 0"),
        ("log.cleaner.min.compaction.lag.ms", "soon", "Not a number"),
        ("log.cleaner.max.compaction.lag.ms", "0", "Value must be at least 1"),
        ("log.flush.offset.checkpoint.interval.ms", "-1", "Value must be at least 0"),
        ("replica.high.watermark.checkpoint.interval.ms", "-5", "Value must be at least 0"),
        ("internal.metadata.delete.delay.millis", "-1", "Value must be at least 0"),
    ],
)
def test_bad_broker_values_name_the_key(key: str, value: str, reason: str) -> None:
    message = refused(with_(BROKER, **{key: value}))
    assert key in message
    assert reason in message


def test_replica_fetch_wait_must_fit_the_socket_timeout_and_the_lag_time() -> None:
    assert "replica.socket.timeout.ms should always be at least replica.fetch.wait.max.ms" in refused(
        with_(BROKER, **{"replica.fetch.wait.max.ms": "40000", "replica.lag.time.max.ms": "50000"})
    )
    assert "replica.fetch.wait.max.ms should always be less than or equal to replica.lag.time.max.ms" in refused(
        with_(BROKER, **{"replica.fetch.wait.max.ms": "2000", "replica.lag.time.max.ms": "1000"})
    )


def test_max_connections_per_ip_overrides_are_read_as_kafka_writes_them() -> None:
    config = parse_config({**CONTROLLER, "max.connections.per.ip.overrides": "hostName:100, 127.0.0.1:200,::1:3"})
    assert config.max_connections_per_ip_overrides == {"hostName": 100, "127.0.0.1": 200, "::1": 3}
    assert config.unknown_keys == ()
    assert parse_config(CONTROLLER).max_connections_per_ip_overrides == {}
    # 0 is allowed per ip only when some addresses have their own limit (Kafka's rule and message).
    assert parse_config({**CONTROLLER, "max.connections.per.ip": "0",
                         "max.connections.per.ip.overrides": "10.0.0.1:5"}).max_connections_per_ip == 0
    assert refused({**CONTROLLER, "max.connections.per.ip": "0"}) == (
        "max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides property is set."
    )


@pytest.mark.parametrize(("value", "reason"), [
    ("localhost", "'localhost' is not host:count"),
    (":5", "':5' is not host:count"),
    ("localhost:many", "Invalid value many for configuration max.connections.per.ip.overrides"),
    ("localhost:-1", "at least 0"),
])
def test_malformed_max_connections_per_ip_overrides_are_refused(value: str, reason: str) -> None:
    assert reason in refused({**CONTROLLER, "max.connections.per.ip.overrides": value})


def test_override_host_names_are_resolved_when_the_node_starts() -> None:
    from kraft_engine.server.listener_limits import listener_limits
    from kraft_engine.server.startup_checks import StartupError

    limits = listener_limits(parse_config({**CONTROLLER, "max.connections.per.ip.overrides": "localhost:7,10.1.2.3:2"}))
    assert limits["max_connections_per_ip_overrides"]["10.1.2.3"] == 2
    assert {ip for ip, count in limits["max_connections_per_ip_overrides"].items() if count == 7} & {"127.0.0.1", "::1"}
    with pytest.raises(StartupError, match=r"cannot resolve no-such-host\.invalid"):
        listener_limits(parse_config({**CONTROLLER, "max.connections.per.ip.overrides": "no-such-host.invalid:1"}))
