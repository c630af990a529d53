"""The engine's `server.properties` rules, as the planner's `ConfigRules` port.

The planner may not import the node's `server` package, so the shell hands it this object. It
checks a cluster-wide override the way a node would take it:
- a key the engine interprets (`controller.quorum.*`, `metadata.*`, `broker.heartbeat.interval.ms`,
  ...) must parse with the engine's own rules (`kraft_engine.server.config.parse_config`, the same
  function `kraft server start` runs);
- a broker key that is the broker-level setting of a topic config (`log.retention.ms`,
  `min.insync.replicas`, ...) must parse with the controller's Kafka config schema
  (`kraft_engine.controller.config_schema`);
- a handful of Kafka broker keys a broker pool commonly sets (`num.partitions`,
  `default.replication.factor`, `offsets.topic.replication.factor`, ...) are typed below;
- any other key is refused as unknown. Kafka itself only warns about unknown keys; the operator is
  stricter because a misspelt key there silently does nothing on every node.
Whole rendered configs are checked with `parse_config`, which applies Kafka's cross-key rules.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping

from kraft_engine.controller.config_schema import InvalidConfigError, broker_config
from kraft_engine.server.config import ConfigError, parse_config

__all__ = ["KAFKA_BROKER_KEYS", "EngineConfigRules"]

# A minimal valid controller config: an override is checked by adding it to this.
_PROBE = {
    "process.roles": "controller",
    "node.id": "1",
    "controller.listener.names": "CONTROLLER",
    "listeners": "CONTROLLER://127.0.0.1:9093",
    "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    "log.dirs": "/probe",
}

# Kafka broker keys outside the engine and the topic-config synonyms: (type, minimum).
KAFKA_BROKER_KEYS: dict[str, tuple[str, int]] = {
    "auto.create.topics.enable": ("boolean", 0),
    "auto.leader.rebalance.enable": ("boolean", 0),
    "default.replication.factor": ("int", 1),
    "delete.topic.enable": ("boolean", 0),
    "group.initial.rebalance.delay.ms": ("int", 0),
    "log.cleaner.enable": ("boolean", 0),
    "log.retention.check.interval.ms": ("long", 1),
    "num.io.threads": ("int", 1),
    "num.network.threads": ("int", 1),
    "num.partitions": ("int", 1),
    "num.recovery.threads.per.data.dir": ("int", 1),
    "num.replica.fetchers": ("int", 1),
    "offsets.topic.num.partitions": ("int", 1),
    "offsets.topic.replication.factor": ("short", 1),
    "replica.lag.time.max.ms": ("long", 0),
    "share.coordinator.state.topic.min.isr": ("short", 1),
    "share.coordinator.state.topic.replication.factor": ("short", 1),
    "socket.receive.buffer.bytes": ("int", -1),
    "socket.send.buffer.bytes": ("int", -1),
    "transaction.state.log.min.isr": ("int", 1),
    "transaction.state.log.replication.factor": ("short", 1),
}
_MAX = {"int": 2**31 - 1, "short": 2**15 - 1, "long": 2**63 - 1}


_ENGINE_LOG = logging.getLogger("kraft_engine.server.config")


@contextlib.contextmanager
def _quiet_engine_log() -> Iterator[None]:
    """The probe parses with keys the engine does not know on purpose; its "supplied but not used"
    warning would otherwise be logged on every reconcile."""

    def reject(record: logging.LogRecord) -> bool:
        return False

    _ENGINE_LOG.addFilter(reject)
    try:
        yield
    finally:
        _ENGINE_LOG.removeFilter(reject)


class EngineConfigRules:
    """`ConfigRules` backed by the engine's config parser and Kafka config schema."""

    def override_problem(self, key: str, value: str) -> str | None:
        try:
            with _quiet_engine_log():
                parsed = parse_config({**_PROBE, key: value})
        except ConfigError as e:
            return str(e)
        if key not in parsed.unknown_keys:
            return None
        definition = broker_config(key)
        if definition is not None:
            try:
                definition.parse(value)
            except InvalidConfigError as e:
                return str(e)
            return None
        typed = KAFKA_BROKER_KEYS.get(key)
        if typed is None:
            return (
                f"unknown configuration {key!r}: neither the engine nor Kafka's broker config schema the "
                "operator knows has it"
            )
        kind, minimum = typed
        text = value.strip()
        if kind == "boolean":
            return None if text.lower() in ("true", "false") else (
                f"Invalid value {value} for configuration {key}: Expected value to be either true or false"
            )
        try:
            number = int(text)
        except ValueError:
            return f"Invalid value {value} for configuration {key}: Not a number of type {kind.upper()}"
        if not minimum <= number <= _MAX[kind]:
            return f"Invalid value {value} for configuration {key}: Value must be at least {minimum}"
        return None

    def node_problem(self, properties: Mapping[str, str]) -> str | None:
        try:
            with _quiet_engine_log():
                parse_config({k: v for k, v in properties.items() if self._engine_key(k)})
        except ConfigError as e:
            return str(e)
        return None

    @staticmethod
    def _engine_key(key: str) -> bool:
        # Keys only Kafka's brokers read are checked per override; leaving them out keeps the
        # engine's "supplied but not used" warning out of every reconcile.
        return broker_config(key) is None and key not in KAFKA_BROKER_KEYS
