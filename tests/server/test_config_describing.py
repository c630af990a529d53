"""A broker's DescribeConfigs with all configs lists every key Kafka 4.1's KafkaConfig lists, with
Kafka's defaults, synonym chains, read-only flags and sensitive keys (the interop test compares the
printed lines with Kafka's own node; this one needs no jars)."""

from __future__ import annotations

import asyncio

from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.static.primitive import i8

from kraft_engine.metadata import MetadataImage
from kraft_engine.protocol import RequestContext
from kraft_engine.server.config_describing import BrokerConfigDescriber
from kraft_engine.server.kafka_broker_configs import KAFKA_BROKER_CONFIGS

STATIC = {"node.id": "7", "process.roles": "broker", "num.partitions": " 2", "log.retention.hours": "100",
          "kraftwerk.metrics.port": "9100"}


def _describe_broker() -> dict[str, object]:
    describer = BrokerConfigDescriber(node_id=7, static_config=STATIC, image=lambda: MetadataImage.EMPTY)
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(resource_type=i8(4), resource_name="7",
                                                                        configuration_keys=None),),
                                     include_synonyms=True, include_documentation=False)
    ctx = RequestContext(api_key=32, api_version=4, correlation_id=0, client_id=None, peer=("", 0), listener_name="")
    response = asyncio.run(describer.describe_configs(request, ctx))
    return {c.name: c for c in response.results[0].configs}


def test_every_kafka_broker_key_is_listed_with_kafkas_default_and_chain() -> None:
    configs = _describe_broker()
    assert set(KAFKA_BROKER_CONFIGS) <= set(configs)
    assert len(KAFKA_BROKER_CONFIGS) == 316  # Kafka 4.1's non-internal KafkaConfig keys
    assert set(configs) - set(KAFKA_BROKER_CONFIGS) == {"kraftwerk.metrics.port"}  # our own key from the file
    io_threads = configs["num.io.threads"]
    assert (io_threads.value, io_threads.config_source, io_threads.read_only) == ("8", 5, False)  # dynamic in Kafka
    assert [(s.name, s.value, s.source) for s in io_threads.synonyms] == [("num.io.threads", "8", 5)]
    partitions = configs["num.partitions"]
    assert [(s.name, s.value, s.source) for s in partitions.synonyms] == [("num.partitions", "2", 4),
                                                                          ("num.partitions", "1", 5)]
    assert (partitions.value, partitions.read_only) == ("2", True)
    # KRaft: broker.id is the node id, as Kafka's config sets it.
    assert [(s.name, s.value, s.source) for s in configs["broker.id"].synonyms] == [("broker.id", "7", 4),
                                                                                   ("broker.id", "-1", 5)]
    # Keys Kafka has no default for have no value and no chain.
    assert (configs["advertised.listeners"].value, configs["advertised.listeners"].synonyms) == (None, ())
    # PASSWORD keys are sensitive and never carry a value.
    password = configs["ssl.key.password"]
    assert (password.value, password.is_sensitive, password.config_type) == (None, True, 9)
    assert sum(c.is_sensitive for c in configs.values()) == sum(
        k.type == "PASSWORD" for k in KAFKA_BROKER_CONFIGS.values())
    # The group rules still hold (as Kafka 4.1 prints them for log.retention.hours=100 in the file).
    assert [(s.name, s.value, s.source) for s in configs["log.retention.hours"].synonyms] == [
        ("log.retention.hours", "100", 4), ("log.retention.hours", "168", 5)]
    assert (configs["log.retention.ms"].value, configs["log.retention.ms"].synonyms) == (None, ())


def test_the_throttle_rates_are_read_only_longs_as_kafka_reports_them() -> None:
    """Kafka 4.1 lists a set throttle rate typed LONG (KafkaConfig defines the quota keys as
    internal) and read-only (DynamicBrokerConfig does not count them among its reconfigurable
    keys); tests/interop/test_kafka_configs_tool.py compares the dynamic ones with Kafka's node."""
    describer = BrokerConfigDescriber(node_id=7, static_config={**STATIC, "leader.replication.throttled.rate": "5000"},
                                      image=lambda: MetadataImage.EMPTY)
    request = DescribeConfigsRequest(resources=(DescribeConfigsResource(
        resource_type=i8(4), resource_name="7", configuration_keys=("leader.replication.throttled.rate",)),),
        include_synonyms=True, include_documentation=False)
    ctx = RequestContext(api_key=32, api_version=4, correlation_id=0, client_id=None, peer=("", 0), listener_name="")
    (rate,) = asyncio.run(describer.describe_configs(request, ctx)).results[0].configs
    assert (rate.value, rate.config_source, rate.read_only, rate.config_type) == ("5000", 4, True, 5)
    assert [(s.name, s.value, s.source) for s in rate.synonyms] == [("leader.replication.throttled.rate", "5000", 4)]
