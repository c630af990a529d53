"""IncrementalAlterConfigs and DescribeConfigs through the quorum controller, and the config
checks CreateTopics makes: records written, per-resource results, and values in force."""

from __future__ import annotations

import datetime

from kio.schema.delete_topics.v6.request import DeleteTopicsRequest, DeleteTopicState
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import TopicName
from kio.static.primitive import i8, i32Timedelta

from kraft_engine.controller.config_schema import ConfigSource
from kraft_engine.records import ConfigRecord

from .harness import Harness

TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _alter(h: Harness, *resources: tuple[int, str, list[tuple[str, int, str | None]]],
           validate_only: bool = False) -> list[tuple[ErrorCode, str | None]]:
    response = h.run(h.controller.incremental_alter_configs(IncrementalAlterConfigsRequest(
        resources=tuple(
            AlterConfigsResource(resource_type=i8(t), resource_name=n, configs=tuple(
                AlterableConfig(name=k, config_operation=i8(op), value=v) for k, op, v in changes))
            for t, n, changes in resources),
        validate_only=validate_only,
    )))
    return [(r.error_code, r.error_message) for r in response.responses]  # type: ignore[attr-defined]


def _describe(h: Harness, resource_type: int, name: str, keys: tuple[str, ...] | None = None, *,
              synonyms: bool = False) -> tuple[ErrorCode, dict[str, tuple[str | None, int]], object]:
    response = h.controller.describe_configs(DescribeConfigsRequest(
        resources=(DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                           configuration_keys=keys),),
        include_synonyms=synonyms,
    ))
    [result] = response.results
    return result.error_code, {c.name: (c.value, int(c.config_source)) for c in result.configs}, result


def test_set_delete_append_and_subtract_write_config_records_and_replay() -> None:
    h = Harness().unfenced(1)
    h.create_topic("orders")
    assert _alter(h, (TOPIC, "orders", [("retention.ms", SET, "1000"), ("cleanup.policy", APPEND, "compact")])) == [
        (ErrorCode.none, None)]
    assert h.written == [
        ConfigRecord(resource_type=TOPIC, resource_name="orders", name="retention.ms", value="1000"),
        ConfigRecord(resource_type=TOPIC, resource_name="orders", name="cleanup.policy", value="delete,compact"),
    ]
    assert h.controller.configuration_control.configs(TOPIC, "orders") == {
        "retention.ms": "1000", "cleanup.policy": "delete,compact"}
    assert _alter(h, (TOPIC, "orders", [("cleanup.policy", SUBTRACT, "delete"), ("retention.ms", DELETE, None)])) == [
        (ErrorCode.none, None)]
    assert h.controller.configuration_control.configs(TOPIC, "orders") == {"cleanup.policy": "compact"}
    # Setting a value it already has writes nothing for a topic.
    assert _alter(h, (TOPIC, "orders", [("cleanup.policy", SET, "compact")])) == [(ErrorCode.none, None)]
    assert h.written == []


def test_invalid_values_are_refused_naming_the_key_and_nothing_is_written() -> None:
    h = Harness().unfenced(1, 2)
    h.create_topic("orders", 1, 2)
    cases = {
        ("min.insync.replicas", "0"): "Invalid value 0 for configuration min.insync.replicas: Value must be at least 1",
        ("unclean.leader.election.enable", "maybe"): (
            "Invalid value maybe for configuration unclean.leader.election.enable: Expected value to be either true "
            "or false"),
        ("retention.ms", "-2"): "Invalid value -2 for configuration retention.ms: Value must be at least -1",
        ("retention.bytes", "lots"): (
            "Invalid value lots for configuration retention.bytes: Not a number of type LONG"),
        ("cleanup.policy", "forever"): (
            "Invalid value forever for configuration cleanup.policy: String must be one of: compact, delete"),
        ("min.insync.replicas", "3"): (
            "Invalid value 3 for configuration min.insync.replicas: min.insync.replicas must be no greater than "
            "the replication factor (2)"),
        ("no.such.config", "1"): "Unknown topic config name: no.such.config",
        # KIP-390's levels, with Kafka 4.1's messages (read off its LogConfig.validate).
        ("compression.gzip.level", "0"): (
            "Invalid value 0 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
        ("compression.gzip.level", "10"): (
            "Invalid value 10 for configuration compression.gzip.level: Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "0"): "Invalid value 0 for configuration compression.lz4.level: Value must be at least 1",
        ("compression.zstd.level", "23"): (
            "Invalid value 23 for configuration compression.zstd.level: Value must be no more than 22"),
        ("compression.zstd.level", "-131073"): (
            "Invalid value -131073 for configuration compression.zstd.level: Value must be at least -131072"),
        ("min.cleanable.dirty.ratio", "2"): (
            "Invalid value 2 for configuration min.cleanable.dirty.ratio: Value must be no more than 1"),
    }
    for (key, value), message in cases.items():
        assert _alter(h, (TOPIC, "orders", [(key, SET, value)])) == [(ErrorCode.invalid_config, message)]
    assert _alter(h, (TOPIC, "orders", [("retention.ms", APPEND, "5")])) == [
        (ErrorCode.invalid_config, "Can't APPEND to key retention.ms because its type is not LIST.")]
    assert h.written == [] and h.controller.configuration_control.configs(TOPIC, "orders") == {}


def test_a_min_compaction_lag_above_the_max_is_refused_as_kafkas_log_config_refuses_it() -> None:
    h = Harness().unfenced(1)
    conflict = "conflict topic config setting min.compaction.lag.ms ({}) > max.compaction.lag.ms ({})"
    refused = h.create_topic("table", configs={"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"})
    assert (refused.error_code, refused.error_message) == (  # type: ignore[attr-defined]
        ErrorCode.invalid_config, conflict.format(5000, 1000))
    h.create_topic("orders", configs={"max.compaction.lag.ms": "1000"})
    assert _alter(h, (TOPIC, "orders", [("min.compaction.lag.ms", SET, "2000")])) == [
        (ErrorCode.invalid_config, conflict.format(2000, 1000))]
    # Against the broker-level lag it inherits once its own is deleted (Kafka's default: Long.MAX_VALUE).
    assert _alter(h, (TOPIC, "orders", [("min.compaction.lag.ms", SET, "2000"), ("max.compaction.lag.ms", DELETE, None)])) == [
        (ErrorCode.none, None)]
    assert _alter(h, (TOPIC, "orders", [("max.compaction.lag.ms", SET, "0")])) == [
        (ErrorCode.invalid_config, "Invalid value 0 for configuration max.compaction.lag.ms: Value must be at least 1")]
    assert h.controller.configuration_control.configs(TOPIC, "orders") == {"min.compaction.lag.ms": "2000"}


def test_resource_refusals_are_per_resource() -> None:
    h = Harness().unfenced(1)
    h.create_topic("orders")
    results = _alter(
        h,
        (TOPIC, "ghost", [("retention.ms", SET, "1")]),
        (TOPIC, "orders", [("retention.ms", SET, "1")]),
        (BROKER, "x", [("log.retention.ms", SET, "1")]),
        (BROKER, "7", [("log.retention.ms", SET, "1")]),
        (TOPIC, "orders2", [("a", SET, "1"), ("a", DELETE, None)]),
        (TOPIC, "orders", [("retention.ms", SET, None)]),
    )
    assert results == [
        (ErrorCode.unknown_topic_or_partition, "The topic 'ghost' does not exist."),
        (ErrorCode.invalid_request, "Duplicate resource."),
        (ErrorCode.invalid_request, "Unable to parse broker name x"),
        (ErrorCode.broker_id_not_registered, "No node with id 7 found."),
        (ErrorCode.invalid_request, "Error due to duplicate config keys"),
        (ErrorCode.invalid_request, "Duplicate resource."),
    ]
    assert h.written == []


def test_broker_configs_and_validate_only() -> None:
    h = Harness().unfenced(1)
    assert _alter(h, (BROKER, "", [("unclean.leader.election.enable", SET, "true")]), validate_only=True) == [
        (ErrorCode.none, None)]
    assert h.written == []
    assert _alter(h, (BROKER, "1", [("log.retention.ms", SET, "-5")])) == [
        (ErrorCode.invalid_config, "Invalid value -5 for configuration log.retention.ms: Value must be at least -1")]
    assert _alter(h, (BROKER, "", [("unclean.leader.election.enable", SET, "true")])) == [(ErrorCode.none, None)]
    assert h.written == [ConfigRecord(resource_type=BROKER, resource_name="", name="unclean.leader.election.enable",
                                      value="true")]
    h.create_topic("orders")
    assert h.controller.configuration_control.unclean_leader_election_enabled_for_topic("orders")
    # Broker configs are rewritten even when unchanged: brokers react to the record itself.
    _alter(h, (BROKER, "", [("unclean.leader.election.enable", SET, "true")]))
    assert len(h.written) == 1


def test_describe_shows_values_in_force_with_their_sources() -> None:
    h = Harness(static_config={"log.retention.hours": "1"}).unfenced(1)
    h.create_topic("orders", configs={"cleanup.policy": "compact"})
    _alter(h, (BROKER, "", [("min.insync.replicas", SET, "1")]))
    code, configs, _ = _describe(h, TOPIC, "orders")
    assert code == ErrorCode.none
    assert configs["cleanup.policy"] == ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert configs["min.insync.replicas"] == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert configs["retention.ms"] == ("3600000", ConfigSource.STATIC_BROKER_CONFIG)
    assert configs["unclean.leader.election.enable"] == ("false", ConfigSource.DEFAULT_CONFIG)
    code, configs, result = _describe(h, TOPIC, "orders", ("retention.ms",), synonyms=True)
    assert list(configs) == ["retention.ms"]
    [entry] = result.configs  # type: ignore[attr-defined]
    assert [(s.name, s.value, int(s.source)) for s in entry.synonyms] == [
        ("log.retention.hours", "1", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.ms", "604800000", ConfigSource.DEFAULT_CONFIG),
    ]
    assert _describe(h, TOPIC, "ghost")[0] == ErrorCode.unknown_topic_or_partition
    code, configs, _ = _describe(h, BROKER, "1")
    assert code == ErrorCode.none
    assert configs["min.insync.replicas"] == ("1", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert configs["log.retention.hours"] == ("1", ConfigSource.STATIC_BROKER_CONFIG)
    assert configs["log.cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG)


def test_describe_reads_the_stable_state() -> None:
    h = Harness().unfenced(1)
    h.create_topic("orders")
    h.controller.incremental_alter_configs(IncrementalAlterConfigsRequest(resources=(AlterConfigsResource(
        resource_type=i8(TOPIC), resource_name="orders",
        configs=(AlterableConfig(name="retention.ms", config_operation=i8(SET), value="5"),)),), validate_only=False))
    assert _describe(h, TOPIC, "orders")[1]["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG)
    h.commit()
    assert _describe(h, TOPIC, "orders")[1]["retention.ms"] == ("5", ConfigSource.DYNAMIC_TOPIC_CONFIG)


def test_create_topics_validates_its_configs() -> None:
    h = Harness().unfenced(1, 2)
    too_strict = h.create_topic("orders", 1, 2, configs={"min.insync.replicas": "3"})
    assert too_strict.error_code == ErrorCode.invalid_config  # type: ignore[attr-defined]
    assert "min.insync.replicas" in too_strict.error_message  # type: ignore[attr-defined]
    unknown = h.create_topic("orders", 1, 2, configs={"retention.forever": "yes"})
    assert (unknown.error_code, unknown.error_message) == (  # type: ignore[attr-defined]
        ErrorCode.invalid_config, "Unknown topic config name: retention.forever")
    assert h.written == [] and h.controller.replication_control.topic_id("orders") is None
    created = h.create_topic("orders", 1, 2, configs={"min.insync.replicas": "2"})
    assert created.error_code == ErrorCode.none  # type: ignore[attr-defined]
    # The response carries every config in force for the new topic, as Kafka's does.
    effective = {c.name: (c.value, int(c.config_source)) for c in created.configs}  # type: ignore[attr-defined]
    assert effective["min.insync.replicas"] == ("2", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert effective["retention.ms"] == ("604800000", ConfigSource.DEFAULT_CONFIG)
    assert len(effective) == 33  # Kafka 4.1 LogConfig: remote.log.copy.disable and remote.log.delete.on.disable too


def test_deleting_a_topic_drops_only_its_configs_and_a_revert_brings_them_back() -> None:
    h = Harness().unfenced(1)
    h.create_topic("orders", configs={"retention.ms": "1000"})
    h.create_topic("payments", configs={"retention.ms": "2000"})
    configs = h.controller.configuration_control
    h.controller.delete_topics(DeleteTopicsRequest(topics=(DeleteTopicState(name=TopicName("orders"), topic_id=None),),
                                                   timeout=i32Timedelta.parse(datetime.timedelta(seconds=30))))
    assert configs.configs(TOPIC, "orders") == {}
    assert configs.configs(TOPIC, "orders", h.controller.last_stable_offset()) == {"retention.ms": "1000"}
    assert configs.configs(TOPIC, "payments") == {"retention.ms": "2000"}
    # Losing leadership before the deletion commits reverts it, configs included.
    h.controller.handle_leader_change(leader_id=3001, epoch=2, now_ms=0, raft_is_leader=False)
    assert configs.configs(TOPIC, "orders") == {"retention.ms": "1000"}
    assert configs.topic_config("orders", "retention.ms") == "1000"
