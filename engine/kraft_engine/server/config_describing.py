"""DescribeConfigs answered by the broker itself, as Kafka's broker answers it (ConfigHelper).

A Kafka broker never forwards DescribeConfigs: the answer is what *this* broker has in force,
its own server.properties under the dynamic configs of its metadata image, and Kafka's admin
client sends a broker resource to that broker. `kafka-configs --describe` prints the answer's
values and synonym chains, so the chains follow Kafka's rules exactly:

- A broker key's synonyms are its own name and, for the keys Kafka groups, the others of its group
  (`log.retention.ms/minutes/hours`, `log.roll.ms/hours`, `log.roll.jitter.ms/hours`,
  `log.flush.interval.ms` with `log.flush.scheduler.interval.ms`). The chain lists every synonym
  found, layer by layer: this broker's dynamic config, the cluster-wide dynamic default, the static
  server.properties, Kafka's defaults (only keys whose default is not null); then the entries before
  the first one named like the key are dropped (so `log.retention.ms`'s chain never starts with
  `log.retention.hours`, and a topic's `retention.ms` with no override shows `{}`).
- A topic config's chain is its broker synonym's chain, preceded by the topic's own override.
- The cluster-default resource (empty name) lists the dynamic default keys, each with only its
  dynamic-default synonym. A broker resource naming another broker is INVALID_REQUEST with Kafka's
  message; an unknown topic is UNKNOWN_TOPIC_OR_PARTITION.

A broker's full listing (`--all`) holds every key Kafka 4.1's KafkaConfig lists (316, with their
types and defaults as Kafka renders them, from the generated `kafka_broker_configs`; Kafka's
internal keys left out as Kafka leaves them out), this broker's server.properties and the dynamic
keys, each with the value in force (DynamicBrokerConfig's: a dynamic key drops its synonyms from
the static file, so a dynamic `log.retention.ms` shows `log.retention.hours` at its default while
its chain still lists the static value, exactly as Kafka prints it) and its chain; a key is read-only unless Kafka's
DynamicBrokerConfig can change it, and PASSWORD keys are sensitive with no value, as Kafka's.
`broker.id` is this node's id from its server.properties, as Kafka's KRaft config sets it. Many of
those keys name features this engine does not have (SSL, SASL, quotas, tiered storage, share
groups, ...): they are listed with the value Kafka would show, and the engine does not act on them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.controller.config_schema import (
    BROKER_SYNONYMS,
    TOPIC_CONFIGS,
    ConfigSource,
    ConfigType,
    broker_config,
    resolve_topic_config,
)
from kraft_engine.errors import ServerError
from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.configs_image import ConfigResource, ConfigResourceType
from kraft_engine.protocol import RequestContext, make_entity
from kraft_engine.server.kafka_broker_configs import KAFKA_BROKER_CONFIGS

__all__ = ["BrokerConfigDescriber", "RequestRefused", "kafka_broker_synonyms"]

_GROUPS: tuple[tuple[str, ...], ...] = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)
# Kafka's broker defaults where they differ from the topic default behind them: the ms keys of a
# group have no default (null), the coarser unit carries it.
_NULL_DEFAULTS = frozenset({"log.retention.ms", "log.retention.minutes", "log.roll.ms", "log.roll.jitter.ms",
                            "log.flush.interval.ms"})
_GROUP_DEFAULTS = {"log.retention.hours": "168", "log.roll.hours": "168", "log.roll.jitter.hours": "0",
                   "log.flush.scheduler.interval.ms": "9223372036854775807"}
_NO_THROTTLE = timedelta(0)


def kafka_broker_synonyms(name: str) -> tuple[str, ...]:
    """Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the key's group, or the key alone."""
    for group in _GROUPS:
        if name in group:
            return group
    return (name,)


def _kafka_default(name: str) -> str | None:
    known = KAFKA_BROKER_CONFIGS.get(name)
    if known is not None:
        return known.default
    if name in _NULL_DEFAULTS:
        return None
    if name in _GROUP_DEFAULTS:
        return _GROUP_DEFAULTS[name]
    definition = broker_config(name)
    if definition is not None and definition.default is not None:
        return definition.default
    topic_name = BROKER_SYNONYMS.get(name)
    return None if topic_name is None else TOPIC_CONFIGS[topic_name].default


class RequestRefused(ServerError):
    """A request (or one resource of it) this broker refuses: its error code and Kafka's message."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


# The broker quota keys (Kafka's QuotaConfig, set as dynamic broker configs by the reassignment
# tool): KafkaConfig defines them as internal LONGs, so Kafka reports their type as LONG and, since
# DynamicBrokerConfig does not list them among its reconfigurable keys, read-only.
_QUOTA_CONFIG_TYPES = {
    "leader.replication.throttled.rate": ConfigType.LONG,
    "follower.replication.throttled.rate": ConfigType.LONG,
    "replica.alter.log.dirs.io.max.bytes.per.second": ConfigType.LONG,
}


def _type_of(name: str) -> ConfigType:
    """Kafka's configType: the key's own type in KafkaConfig, else a synonym's."""
    known = KAFKA_BROKER_CONFIGS.get(name)
    if known is not None:
        return ConfigType[known.type]
    if name in _QUOTA_CONFIG_TYPES:
        return _QUOTA_CONFIG_TYPES[name]
    definition = broker_config(name)
    return definition.type if definition is not None else ConfigType.UNKNOWN


class BrokerConfigDescriber:
    def __init__(self, *, node_id: int, static_config: Mapping[str, str], image: Callable[[], MetadataImage],
                 may_describe: Callable[[RequestContext, int, str], ErrorCode | None] | None = None) -> None:
        """`may_describe(ctx, resource type, name)`: the authorization error for a resource
        (Kafka asks DESCRIBE_CONFIGS on the topic, or on the cluster for a broker), or None."""
        self._may_describe = may_describe
        self._node_id = node_id
        self._static = {k: v.strip() for k, v in static_config.items()}
        if "broker.id" not in self._static and "node.id" in self._static:
            self._static["broker.id"] = self._static["node.id"]  # Kafka's KRaft config does the same
        self._image = image

    async def describe_configs(self, request: Any, ctx: RequestContext) -> Any:
        module = ctx.response_schema
        image = self._image()
        include_synonyms = bool(getattr(request, "include_synonyms", False))
        results = []
        for resource in request.resources:
            resource_type, name = int(resource.resource_type), str(resource.resource_name)
            try:
                refusal = None if self._may_describe is None else self._may_describe(ctx, resource_type, name)
                if refusal is not None:
                    raise RequestRefused(refusal, "Authorization failed.")
                entries = self._entries(image, resource_type, name)
                keys = resource.configuration_keys
                if keys:
                    entries = [e for e in entries if e.name in keys]
                configs = tuple(self._entry(module, e, include_synonyms=include_synonyms) for e in entries)
                error, message = ErrorCode.none, None
            except RequestRefused as refusal:
                configs, error, message = (), refusal.error, refusal.message
            results.append(make_entity(module.DescribeConfigsResult, error_code=error, error_message=message,
                                       resource_type=i8(resource_type), resource_name=name, configs=configs))
        return make_entity(ctx.response_class, throttle_time=_NO_THROTTLE, results=tuple(results))

    # -- what is in force ----------------------------------------------------------------------------
    def _layers(self, image: MetadataImage) -> list[tuple[Mapping[str, str], ConfigSource]]:
        broker = ConfigResourceType.BROKER
        return [
            (image.configs.configs(ConfigResource(broker, str(self._node_id))), ConfigSource.DYNAMIC_BROKER_CONFIG),
            (image.configs.configs(ConfigResource(broker, "")), ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
            (self._static, ConfigSource.STATIC_BROKER_CONFIG),
        ]

    def _chain(self, image: MetadataImage, name: str) -> list[tuple[str, str | None, ConfigSource]]:
        """Kafka's configSynonyms(name, brokerSynonyms(name))."""
        synonyms = kafka_broker_synonyms(name)
        found: list[tuple[str, str | None, ConfigSource]] = []
        for layer, source in self._layers(image):
            found.extend((s, layer[s], source) for s in synonyms if s in layer)
        for s in synonyms:
            default = _kafka_default(s)
            if default is not None:
                found.append((s, default, ConfigSource.DEFAULT_CONFIG))
        while found and found[0][0] != name:
            found.pop(0)
        return found

    def _entries(self, image: MetadataImage, resource_type: int, name: str) -> list[_Entry]:
        if resource_type == ConfigResourceType.TOPIC:
            if image.topics.get_topic_by_name(name) is None:
                raise RequestRefused(ErrorCode.unknown_topic_or_partition, f"Topic {name} does not exist.")
            return self._topic_entries(image, name)
        if resource_type == ConfigResourceType.BROKER:
            if name == "":
                return self._default_entries(image)
            if name != str(self._node_id):
                raise RequestRefused(ErrorCode.invalid_request,
                               f"Unexpected broker id, expected {self._node_id} or empty string, but received {name}")
            return self._broker_entries(image)
        raise RequestRefused(ErrorCode.invalid_request,
                       f"Unsupported resource type {resource_type}: this broker describes topics and brokers")

    def _topic_entries(self, image: MetadataImage, topic: str) -> list[_Entry]:
        overrides = image.configs.configs(ConfigResource(ConfigResourceType.TOPIC, topic))
        layers = self._layers(image)
        entries = []
        for definition in sorted(TOPIC_CONFIGS.values(), key=lambda d: d.name):
            value, _, _ = resolve_topic_config(definition, topic=overrides, node=layers[0][0], cluster=layers[1][0],
                                               static=self._static)
            chain = self._chain(image, definition.synonyms[0]) if definition.synonyms else []
            if definition.name in overrides:
                chain.insert(0, (definition.name, overrides[definition.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
            entries.append(_Entry(definition.name, value, chain, definition.type, read_only=False))
        return entries

    def _broker_entries(self, image: MetadataImage) -> list[_Entry]:
        names = set(self._static) | set(BROKER_SYNONYMS) | set(KAFKA_BROKER_CONFIGS)
        layers = self._layers(image)
        for layer, _ in layers[:2]:
            names |= set(layer)
        # The values in force, as Kafka's DynamicBrokerConfig builds them: the static file, then the
        # cluster's and this broker's dynamic configs, each key removing its synonyms first (so a
        # dynamic log.retention.ms puts a static log.retention.hours back to its default).
        in_force = dict(self._static)
        for layer, _ in (layers[1], layers[0]):
            for key, key_value in layer.items():
                for synonym in kafka_broker_synonyms(key):
                    in_force.pop(synonym, None)
                in_force[key] = key_value
        entries = []
        for name in sorted(names):
            known = KAFKA_BROKER_CONFIGS.get(name)
            kind = _type_of(name)
            if kind is ConfigType.PASSWORD:
                entries.append(_Entry(name, None, [], kind, read_only=not known or not known.dynamic, sensitive=True))
                continue
            chain = self._chain(image, name)
            value = in_force[name] if name in in_force else _kafka_default(name)
            read_only = not known.dynamic if known is not None else name not in BROKER_SYNONYMS
            entries.append(_Entry(name, value, chain, kind, read_only=read_only))
        return entries

    def _default_entries(self, image: MetadataImage) -> list[_Entry]:
        dynamic_default = self._layers(image)[1][0]
        entries = []
        for name in sorted(dynamic_default):
            entries.append(_Entry(name, dynamic_default[name],
                                  [(name, dynamic_default[name], ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)],
                                  _type_of(name),
                                  read_only=name not in BROKER_SYNONYMS))
        return entries

    @staticmethod
    def _entry(module: Any, entry: _Entry, *, include_synonyms: bool) -> Any:
        source = entry.chain[0][2] if entry.chain else ConfigSource.DEFAULT_CONFIG
        synonyms = tuple(module.DescribeConfigsSynonym(name=n, value=v, source=i8(s)) for n, v, s in entry.chain) \
            if include_synonyms and hasattr(module, "DescribeConfigsSynonym") else ()
        return make_entity(module.DescribeConfigsResourceResult, name=entry.name, value=entry.value, read_only=entry.read_only,
                           config_source=i8(source), is_default=source == ConfigSource.DEFAULT_CONFIG,
                           is_sensitive=entry.sensitive,
                           synonyms=synonyms, config_type=i8(entry.kind), documentation=None)


@dataclasses.dataclass(frozen=True, slots=True)
class _Entry:
    name: str
    value: str | None
    chain: Sequence[tuple[str, str | None, ConfigSource]]
    kind: ConfigType
    read_only: bool
    sensitive: bool = False
