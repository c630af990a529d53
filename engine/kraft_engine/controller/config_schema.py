"""What the controller knows about Kafka's topic and broker configs: Kafka's KafkaConfigSchema.

IncrementalAlterConfigs must refuse a bad value before it becomes a ConfigRecord that every
broker would then choke on, DescribeConfigs must show the value that is actually in force (a
topic override, else the broker-level setting it falls back to, else Kafka's default), and
elections must read `unclean.leader.election.enable` through the same chain. All three need one
table of names, types, defaults, validators and topic → broker synonyms: this module.

The topic configs are Kafka 4.x's full LogConfig set, so a name Kafka accepts is accepted here
and any other is refused like Kafka refuses it. Broker configs are open-ended in Kafka (plugins
add their own); only the broker keys that are topic-config synonyms are typed and validated.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kraft_engine.errors import ControllerError
from kraft_engine.records.compression import compression_level_problem

__all__ = [
    "BROKER_SYNONYMS",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "ConfigSource",
    "ConfigType",
    "InvalidConfigError",
    "broker_config",
    "parse_bool",
    "resolve_topic_config",
]

_LONG_MAX = 9223372036854775807
_INT_MAX = 2147483647
_INT_MIN = -2147483648
_LONG_MIN = -9223372036854775808


class InvalidConfigError(ControllerError, ValueError):
    """Kafka's ConfigException: the message names the key and the offending value."""


class ConfigType(enum.IntEnum):
    """DescribeConfigs' config_type codes."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class ConfigSource(enum.IntEnum):
    """DescribeConfigs' config_source codes."""

    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5


Check = Callable[[object], str | None]
"""Returns Kafka's validator message for a bad parsed value, or None when it is fine."""


def _at_least(minimum: float) -> Check:
    return lambda v: None if isinstance(v, int | float) and v >= minimum else f"Value must be at least {minimum}"


def _between(low: float, high: float) -> Check:
    """Kafka's ConfigDef.Range.between: which bound is broken is named."""
    def check(v: object) -> str | None:
        if not isinstance(v, int | float):
            return f"Value must be no less than {low} and no more than {high}"
        if v < low:
            return f"Value must be at least {low}"
        return f"Value must be no more than {high}" if v > high else None

    return check


def _compression_level(key: str) -> Check:
    """Kafka's per-codec level validators (KIP-390): gzip's is `[1,...,9] or -1`."""
    return lambda v: compression_level_problem(key, v) if isinstance(v, int) else "Not a number of type INT"


def _one_of(*allowed: str) -> Check:
    return lambda v: None if v in allowed else f"String must be one of: {', '.join(allowed)}"


def _each_of(*allowed: str) -> Check:
    def check(v: object) -> str | None:
        if isinstance(v, list) and all(item in allowed for item in v):
            return None
        return f"String must be one of: {', '.join(allowed)}"

    return check


def _throttled_replicas(v: object) -> str | None:
    """Kafka's ThrottledReplicaListValidator."""
    items = v if isinstance(v, list) else []
    if "".join(items) == "*" or all(re.fullmatch(r"([0-9]+:[0-9]+)?", str(i).strip()) for i in items):
        return None
    return ("must be the literal '*' or a list of replicas in the following format: "
            "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


def parse_bool(text: str) -> bool | None:
    lowered = text.strip().lower()
    return True if lowered == "true" else False if lowered == "false" else None


@dataclass(frozen=True, slots=True)
class ConfigDef:
    name: str
    type: ConfigType
    default: str | None
    check: Check | None = None
    synonyms: tuple[str, ...] = ()
    """Broker keys this topic config falls back to, most specific first (Kafka's synonyms)."""

    def parse(self, value: str) -> object:
        """The typed value, or InvalidConfigError with Kafka's wording."""
        text = value.strip()
        parsed: object
        if self.type in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
            try:
                parsed = int(text)
            except ValueError:
                raise self._invalid(value, f"Not a number of type {self.type.name}") from None
            low, high = (_INT_MIN, _INT_MAX) if self.type is ConfigType.INT else (_LONG_MIN, _LONG_MAX)
            if not low <= parsed <= high:
                raise self._invalid(value, f"Not a number of type {self.type.name}")
        elif self.type is ConfigType.DOUBLE:
            try:
                parsed = float(text)
            except ValueError:
                raise self._invalid(value, "Not a number of type DOUBLE") from None
        elif self.type is ConfigType.BOOLEAN:
            parsed = parse_bool(text)
            if parsed is None:
                raise self._invalid(value, "Expected value to be either true or false")
        elif self.type is ConfigType.LIST:
            parsed = [item.strip() for item in text.split(",")] if text else []
        else:
            parsed = text
        if self.check is not None:
            problem = self.check(parsed)
            if problem is not None:
                raise self._invalid(value, problem)
        return parsed

    def _invalid(self, value: str, reason: str) -> InvalidConfigError:
        return InvalidConfigError(f"Invalid value {value} for configuration {self.name}: {reason}")


def _d(name: str, kind: ConfigType, default: str | None, check: Check | None = None, *synonyms: str) -> ConfigDef:
    return ConfigDef(name, kind, default, check, synonyms)


_T = ConfigType
TOPIC_CONFIGS: Mapping[str, ConfigDef] = {d.name: d for d in (
    _d("cleanup.policy", _T.LIST, "delete", _each_of("compact", "delete"), "log.cleanup.policy"),
    _d("compression.gzip.level", _T.INT, "-1", _compression_level("compression.gzip.level"), "compression.gzip.level"),
    _d("compression.lz4.level", _T.INT, "9", _compression_level("compression.lz4.level"), "compression.lz4.level"),
    _d("compression.type", _T.STRING, "producer",
       _one_of("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"), "compression.type"),
    _d("compression.zstd.level", _T.INT, "3", _compression_level("compression.zstd.level"), "compression.zstd.level"),
    _d("delete.retention.ms", _T.LONG, "86400000", _at_least(0), "log.cleaner.delete.retention.ms"),
    _d("file.delete.delay.ms", _T.LONG, "60000", _at_least(0), "log.segment.delete.delay.ms"),
    _d("flush.messages", _T.LONG, str(_LONG_MAX), _at_least(1), "log.flush.interval.messages"),
    _d("flush.ms", _T.LONG, str(_LONG_MAX), _at_least(0), "log.flush.interval.ms"),
    _d("follower.replication.throttled.replicas", _T.LIST, "", _throttled_replicas),
    _d("index.interval.bytes", _T.INT, "4096", _at_least(0), "log.index.interval.bytes"),
    _d("leader.replication.throttled.replicas", _T.LIST, "", _throttled_replicas),
    _d("local.retention.bytes", _T.LONG, "-2", _at_least(-2), "log.local.retention.bytes"),
    _d("local.retention.ms", _T.LONG, "-2", _at_least(-2), "log.local.retention.ms"),
    _d("max.compaction.lag.ms", _T.LONG, str(_LONG_MAX), _at_least(1), "log.cleaner.max.compaction.lag.ms"),
    _d("max.message.bytes", _T.INT, "1048588", _at_least(0), "message.max.bytes"),
    _d("message.timestamp.after.max.ms", _T.LONG, "3600000", _at_least(0), "log.message.timestamp.after.max.ms"),
    _d("message.timestamp.before.max.ms", _T.LONG, str(_LONG_MAX), _at_least(0),
       "log.message.timestamp.before.max.ms"),
    _d("message.timestamp.type", _T.STRING, "CreateTime", _one_of("CreateTime", "LogAppendTime"),
       "log.message.timestamp.type"),
    _d("min.cleanable.dirty.ratio", _T.DOUBLE, "0.5", _between(0, 1), "log.cleaner.min.cleanable.ratio"),
    _d("min.compaction.lag.ms", _T.LONG, "0", _at_least(0), "log.cleaner.min.compaction.lag.ms"),
    _d("min.insync.replicas", _T.INT, "1", _at_least(1), "min.insync.replicas"),
    _d("preallocate", _T.BOOLEAN, "false", None, "log.preallocate"),
    _d("remote.log.copy.disable", _T.BOOLEAN, "false"),
    _d("remote.log.delete.on.disable", _T.BOOLEAN, "false"),
    _d("remote.storage.enable", _T.BOOLEAN, "false"),
    _d("retention.bytes", _T.LONG, "-1", None, "log.retention.bytes"),
    _d("retention.ms", _T.LONG, "604800000", _at_least(-1), "log.retention.ms", "log.retention.minutes",
       "log.retention.hours"),
    _d("segment.bytes", _T.INT, "1073741824", _at_least(1048576), "log.segment.bytes"),
    _d("segment.index.bytes", _T.INT, "10485760", _at_least(4), "log.index.size.max.bytes"),
    _d("segment.jitter.ms", _T.LONG, "0", _at_least(0), "log.roll.jitter.ms", "log.roll.jitter.hours"),
    _d("segment.ms", _T.LONG, "604800000", _at_least(1), "log.roll.ms", "log.roll.hours"),
    _d("unclean.leader.election.enable", _T.BOOLEAN, "false", None, "unclean.leader.election.enable"),
)}

# Broker keys whose unit differs from their topic config's (converted when falling back).
_SYNONYM_TO_MS = {"log.retention.minutes": 60_000, "log.retention.hours": 3_600_000, "log.roll.hours": 3_600_000,
                  "log.roll.jitter.hours": 3_600_000}

BROKER_SYNONYMS: Mapping[str, str] = {s: d.name for d in TOPIC_CONFIGS.values() for s in d.synonyms}
"""broker key -> the topic config it is the broker-level setting of."""


def broker_config(name: str) -> ConfigDef | None:
    """The typed definition of a broker key, when it is a topic config's synonym."""
    topic_name = BROKER_SYNONYMS.get(name)
    if topic_name is None:
        return None
    topic = TOPIC_CONFIGS[topic_name]
    if name in _SYNONYM_TO_MS:
        kind = ConfigType.INT if name.endswith("hours") or name.endswith("minutes") else topic.type
        return ConfigDef(name, kind, None, topic.check)
    return ConfigDef(name, topic.type, topic.default if name == topic.synonyms[0] else None, topic.check)


def resolve_topic_config(
    definition: ConfigDef,
    *,
    topic: Mapping[str, str],
    node: Mapping[str, str],
    cluster: Mapping[str, str],
    static: Mapping[str, str],
) -> tuple[str | None, ConfigSource, str | None]:
    """(value, source, the key it came from) in Kafka's order: topic override, the node's dynamic
    config, the cluster-wide dynamic default, the static server.properties, Kafka's default."""
    if definition.name in topic:
        return topic[definition.name], ConfigSource.DYNAMIC_TOPIC_CONFIG, definition.name
    for layer, source in ((node, ConfigSource.DYNAMIC_BROKER_CONFIG),
                          (cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                          (static, ConfigSource.STATIC_BROKER_CONFIG)):
        for synonym in definition.synonyms:
            if synonym in layer:
                value = layer[synonym]
                factor = _SYNONYM_TO_MS.get(synonym)
                if factor is not None:
                    try:
                        value = str(int(value) * factor)
                    except ValueError:
                        continue
                return value, source, synonym
    return definition.default, ConfigSource.DEFAULT_CONFIG, definition.name
