"""Dynamic configs as the controller holds them: Kafka's ConfigurationControlManager.

Topic creation writes ConfigRecords (min.insync.replicas, retention.*, ...), IncrementalAlterConfigs
changes them, and the replication manager reads them back (unclean.leader.election.enable decides
whether an election may lose data), so they live in revertible state like any other record.
Generation validates against `config_schema` before any record exists; replay only stores.

Resources are addressed as Kafka does: TOPIC by name, BROKER by node id, with the empty BROKER
name holding the cluster-wide dynamic defaults.
"""

from __future__ import annotations

import datetime
import enum
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence

from kio.schema.describe_configs.v4 import request as describe_request
from kio.schema.describe_configs.v4 import response as describe_response
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1 import request as alter_request
from kio.schema.incremental_alter_configs.v1 import response as alter_response
from kio.static.primitive import i8, i32Timedelta

from kraft_engine.controller.config_schema import (
    TOPIC_CONFIGS,
    ConfigDef,
    ConfigSource,
    ConfigType,
    InvalidConfigError,
    broker_config,
    parse_bool,
    resolve_topic_config,
)
from kraft_engine.controller.results import (
    ApiError,
    ControllerApiError,
    ControllerResult,
    RecordAndVersion,
    check_request_size,
)
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap
from kraft_engine.metadata.configs_image import ConfigResourceType
from kraft_engine.records import ClearElrRecord, ConfigRecord

__all__ = ["ConfigurationControlManager", "OpType"]

_UNCLEAN = "unclean.leader.election.enable"
_MIN_ISR = "min.insync.replicas"
_MIN_COMPACTION_LAG = "min.compaction.lag.ms"
_MAX_COMPACTION_LAG = "max.compaction.lag.ms"


class OpType(enum.IntEnum):
    """IncrementalAlterConfigs' config_operation codes."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


Resource = tuple[int, str]


class _ResourceConfigs(Mapping[str, str]):
    """One resource's configs as a read-only mapping at one epoch: lookups by name are direct,
    so resolving a topic config does not scan every config in the cluster (elections consult
    unclean.leader.election.enable once per partition)."""

    def __init__(self, configs: TimelineHashMap[str, str] | None, epoch: int | None) -> None:
        self._configs = configs
        self._epoch = epoch

    def __getitem__(self, name: str) -> str:
        value = None if self._configs is None else self._configs.get(name, self._epoch)
        if value is None:
            raise KeyError(name)
        return value

    def _names(self) -> list[str]:
        return [] if self._configs is None else self._configs.keys(self._epoch)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


class ConfigurationControlManager:
    def __init__(
        self,
        registry: SnapshotRegistry,
        *,
        node_id: int = -1,
        static_config: Mapping[str, str] | None = None,
        topic_exists: Callable[[str], bool] = lambda _: True,
        node_exists: Callable[[int], bool] = lambda _: True,
        elr_enabled: Callable[[], bool] = lambda: False,
    ) -> None:
        self._registry = registry
        # (resource type, resource name) -> config name -> value. One timeline map per resource,
        # as in Kafka, so that reading or deleting one topic's configs costs what that topic has,
        # not what the whole cluster has (a single map keyed by all three made every topic
        # deletion and every DescribeConfigs scan, and at an epoch copy, every config). A
        # resource whose map empties keeps it; an empty map reads as no configs at every epoch.
        self._configs: dict[Resource, TimelineHashMap[str, str]] = {}
        self._node_id = node_id
        self._static_config = dict(static_config or {})
        self._topic_exists = topic_exists
        self._node_exists = node_exists
        self._elr_enabled = elr_enabled

    # -- replay and reads ------------------------------------------------------------------

    def replay(self, record: ConfigRecord, offset: int) -> None:
        resource = (int(record.resource_type), record.resource_name)
        if record.value is None:
            found = self._configs.get(resource)
            if found is not None:
                found.remove(record.name)
            return
        configs = self._configs.get(resource)
        if configs is None:
            configs = self._configs[resource] = TimelineHashMap(self._registry)
        configs.put(record.name, record.value)

    def delete_topic_configs(self, topic_name: str) -> None:
        """Replay side of RemoveTopicRecord: a deleted topic's configs go with it (a topic
        created later under the same name must not inherit them)."""
        found = self._configs.get((ConfigResourceType.TOPIC, topic_name))
        if found is not None:
            found.clear()

    def configs(self, resource_type: int, resource_name: str, epoch: int | None = None) -> dict[str, str]:
        found = self._configs.get((resource_type, resource_name))
        return {} if found is None else found.snapshot(epoch)

    def _layers(self, topic_name: str | None, epoch: int | None = None) -> dict[str, Mapping[str, str]]:
        broker = ConfigResourceType.BROKER
        return {
            "topic": _ResourceConfigs(self._configs.get((ConfigResourceType.TOPIC, topic_name)), epoch)
            if topic_name is not None else {},
            "node": _ResourceConfigs(self._configs.get((broker, str(self._node_id))), epoch)
            if self._node_id >= 0 else {},
            "cluster": _ResourceConfigs(self._configs.get((broker, "")), epoch),
            "static": self._static_config,
        }

    def topic_config(self, topic_name: str, name: str, epoch: int | None = None) -> str | None:
        """The value in force for a topic (override, node, cluster default, static, default)."""
        value, _, _ = resolve_topic_config(TOPIC_CONFIGS[name], **self._layers(topic_name, epoch))
        return value

    def effective_topic_configs(self, creation_configs: Mapping[str, str]) -> list[tuple[str, str | None, ConfigSource]]:
        """(name, value, source) of every topic config a new topic with `creation_configs` would
        have, sorted by name: what CreateTopics returns (Kafka's computeEffectiveTopicConfigs)."""
        layers = dict(self._layers(None))
        layers["topic"] = creation_configs
        result = []
        for definition in sorted(TOPIC_CONFIGS.values(), key=lambda d: d.name):
            value, source, _ = resolve_topic_config(definition, **layers)
            result.append((definition.name, value, source))
        return result

    def unclean_leader_election_enabled_for_topic(self, topic_name: str) -> bool:
        value = self.topic_config(topic_name, _UNCLEAN)
        return value is not None and parse_bool(value) is True

    def topic_config_reader(self, name: str) -> Callable[[str], str | None]:
        """`topic_config(topic, name)` for many topics while no config changes (one generation):
        every topic without an override of its own inherits the same value, resolved once here,
        instead of building the four config layers per topic (a fence at 10k topics asked twice
        per topic)."""
        inherited = self.topic_config_default(name)
        configs = self._configs

        def read(topic_name: str) -> str | None:
            own = configs.get((ConfigResourceType.TOPIC, topic_name))
            value = None if own is None else own.get(name)
            return inherited if value is None else value

        return read

    def topic_config_default(self, name: str) -> str | None:
        """The value a topic without its own override of `name` has."""
        value, _, _ = resolve_topic_config(TOPIC_CONFIGS[name], **self._layers(None))
        return value

    # -- validation ------------------------------------------------------------------------

    def _validate_resource_name(self, resource_type: int, name: str) -> None:
        if resource_type == ConfigResourceType.TOPIC:
            if not name:
                raise ControllerApiError(ErrorCode.invalid_request, "Default topic resources are not allowed.")
        elif resource_type == ConfigResourceType.BROKER:
            if name:
                try:
                    broker_id = int(name)
                except ValueError:
                    raise ControllerApiError(ErrorCode.invalid_request,
                                             f"Unable to parse broker name {name}") from None
                if broker_id < 0:
                    raise ControllerApiError(ErrorCode.invalid_request, "Invalid negative broker ID.")
        else:
            raise ControllerApiError(ErrorCode.invalid_request, f"Unsupported resource type {resource_type}")

    def _check_exists(self, resource_type: int, name: str) -> None:
        if resource_type == ConfigResourceType.TOPIC and not self._topic_exists(name):
            raise ControllerApiError(ErrorCode.unknown_topic_or_partition, f"The topic '{name}' does not exist.")
        if resource_type == ConfigResourceType.BROKER and name and not self._node_exists(int(name)):
            raise ControllerApiError(ErrorCode.broker_id_not_registered, f"No node with id {name} found.")

    @staticmethod
    def _definition(resource_type: int, name: str) -> ConfigDef | None:
        if resource_type == ConfigResourceType.TOPIC:
            definition = TOPIC_CONFIGS.get(name)
            if definition is None:
                raise ControllerApiError(ErrorCode.invalid_config, f"Unknown topic config name: {name}")
            return definition
        return broker_config(name)

    def _validate_values(self, resource_type: int, configs: Mapping[str, str]) -> None:
        for name, value in configs.items():
            definition = self._definition(resource_type, name)
            if definition is not None:
                try:
                    definition.parse(value)
                except InvalidConfigError as error:
                    raise ControllerApiError(ErrorCode.invalid_config, str(error)) from None

    def validate_new_topic_configs(self, configs: Mapping[str, str], *, replication_factor: int) -> None:
        """CreateTopics' check of its configs: known names, valid values, and a min.insync.replicas
        the replication factor can ever satisfy."""
        self._validate_values(ConfigResourceType.TOPIC, configs)
        self._check_compaction_lags(configs)
        min_isr = configs.get(_MIN_ISR)
        if min_isr is not None and int(min_isr) > replication_factor:
            raise ControllerApiError(
                ErrorCode.invalid_config,
                f"Invalid value {min_isr} for configuration {_MIN_ISR}: min.insync.replicas must be no "
                f"greater than the replication factor ({replication_factor})",
            )

    def _check_compaction_lags(self, topic_configs: Mapping[str, str]) -> None:
        """Kafka's LogConfig.validateValues: a topic's min.compaction.lag.ms (its own or the one
        it inherits) may not exceed its max.compaction.lag.ms."""
        layers = dict(self._layers(None))
        layers["topic"] = topic_configs
        lags = []
        for name in (_MIN_COMPACTION_LAG, _MAX_COMPACTION_LAG):
            value, _, _ = resolve_topic_config(TOPIC_CONFIGS[name], **layers)
            try:
                lags.append(int(value or "0"))
            except ValueError:
                return  # the value check names the bad key
        if lags[0] > lags[1]:
            raise ControllerApiError(
                ErrorCode.invalid_config,
                f"conflict topic config setting {_MIN_COMPACTION_LAG} ({lags[0]}) > {_MAX_COMPACTION_LAG} ({lags[1]})",
            )

    # -- IncrementalAlterConfigs -----------------------------------------------------------

    def incremental_alter_configs(
        self, request: alter_request.IncrementalAlterConfigsRequest,
        *, min_replication_factor: Callable[[str], int | None] = lambda _: None,
    ) -> ControllerResult[alter_response.IncrementalAlterConfigsResponse]:
        """Every resource succeeds or fails on its own; the records of all successful ones are
        written atomically. `min_replication_factor(topic)` lets min.insync.replicas be checked
        against the topic's replicas."""
        check_request_size(len(request.resources))
        check_request_size(sum(len(r.configs) for r in request.resources))
        records: list[RecordAndVersion] = []
        responses: list[alter_response.AlterConfigsResourceResponse] = []
        resources = [(int(r.resource_type), r.resource_name) for r in request.resources]
        repeats = Counter(resources)
        for resource, entry in zip(resources, request.resources, strict=True):
            try:
                if repeats[resource] > 1:
                    raise ControllerApiError(ErrorCode.invalid_request, "Duplicate resource.")
                altered = self._alter_resource(resource, entry.configs, min_replication_factor)
                records.extend(altered)
                records.extend(self._clear_elr_records(altered))
                error = ApiError.NONE
            except ControllerApiError as failure:
                error = ApiError(failure.error_code, failure.message)
            responses.append(alter_response.AlterConfigsResourceResponse(
                error_code=error.error_code, error_message=error.message,
                resource_type=i8(resource[0]), resource_name=resource[1],
            ))
        response = alter_response.IncrementalAlterConfigsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), responses=tuple(responses),
        )
        if request.validate_only:
            return ControllerResult((), response)
        return ControllerResult(records, response, is_atomic=True)

    def _clear_elr_records(self, records: Sequence[RecordAndVersion]) -> list[RecordAndVersion]:
        """Kafka's createClearElrRecordsAsNeeded: with ELR enabled, each min.insync.replicas
        ConfigRecord is followed by a ClearElrRecord for its topic (all topics, named "", for a
        broker-level change): ELRs chosen under the old minimum no longer hold."""
        if not self._elr_enabled():
            return []
        cleared = []
        for entry in records:
            record = entry.record
            if isinstance(record, ConfigRecord) and record.name == _MIN_ISR:
                topic = record.resource_name if record.resource_type == ConfigResourceType.TOPIC else ""
                cleared.append(RecordAndVersion(ClearElrRecord(topic_name=topic), 0))
        return cleared

    def _alter_resource(
        self, resource: Resource, configs: Sequence[alter_request.AlterableConfig],
        min_replication_factor: Callable[[str], int | None],
    ) -> list[RecordAndVersion]:
        resource_type, resource_name = resource
        self._validate_resource_name(resource_type, resource_name)
        names = [c.name for c in configs]
        if len(set(names)) != len(names):
            raise ControllerApiError(ErrorCode.invalid_request, "Error due to duplicate config keys")
        current = self.configs(resource_type, resource_name)
        after = dict(current)
        records: list[RecordAndVersion] = []
        for config in configs:
            try:
                op = OpType(int(config.config_operation))
            except ValueError:
                raise ControllerApiError(ErrorCode.invalid_request,
                                         f"Unknown operation type {int(config.config_operation)}") from None
            if config.value is None and op is not OpType.DELETE:
                raise ControllerApiError(ErrorCode.invalid_request, f"Null value not supported for : {config.name}")
            definition = self._definition(resource_type, config.name)
            new_value: str | None
            if op is OpType.SET:
                new_value = config.value
            elif op is OpType.DELETE:
                new_value = None
            else:
                if definition is None or definition.type is not ConfigType.LIST:
                    raise ControllerApiError(
                        ErrorCode.invalid_config,
                        f"Can't {op.name} to key {config.name} because its type is not LIST.",
                    )
                base = current.get(config.name, definition.default or "")
                parts = [p for p in base.split(",") if p]
                for item in (config.value or "").split(","):
                    if op is OpType.APPEND and item not in parts:
                        parts.append(item)
                    elif op is OpType.SUBTRACT and item in parts:
                        parts.remove(item)
                new_value = ",".join(parts)
            if new_value is None:
                after.pop(config.name, None)
            else:
                after[config.name] = new_value
            # Broker configs are always rewritten: brokers react to the record itself.
            if new_value != current.get(config.name) or resource_type == ConfigResourceType.BROKER:
                records.append(RecordAndVersion(ConfigRecord(
                    resource_type=resource_type, resource_name=resource_name, name=config.name, value=new_value,
                ), 0))
        self._validate_values(resource_type, after)
        self._check_exists(resource_type, resource_name)
        if resource_type == ConfigResourceType.TOPIC:
            self._check_compaction_lags(after)
        if resource_type == ConfigResourceType.TOPIC and _MIN_ISR in after:
            replication_factor = min_replication_factor(resource_name)
            if replication_factor is not None and int(after[_MIN_ISR]) > replication_factor:
                raise ControllerApiError(
                    ErrorCode.invalid_config,
                    f"Invalid value {after[_MIN_ISR]} for configuration {_MIN_ISR}: min.insync.replicas must "
                    f"be no greater than the replication factor ({replication_factor})",
                )
        return records

    # -- DescribeConfigs -------------------------------------------------------------------

    def describe_configs(
        self, request: describe_request.DescribeConfigsRequest, *, epoch: int | None = None
    ) -> describe_response.DescribeConfigsResponse:
        """Configs in force as of `epoch` (the stable offset), with their sources; synonyms
        when asked."""
        results = []
        for resource in request.resources:
            resource_type, name = int(resource.resource_type), resource.resource_name
            try:
                self._validate_resource_name(resource_type, name)
                self._check_exists(resource_type, name)
                entries = self._describe(resource_type, name, epoch, bool(request.include_synonyms))
                keys = resource.configuration_keys
                if keys:
                    entries = [e for e in entries if e.name in keys]
                results.append(describe_response.DescribeConfigsResult(
                    error_code=ErrorCode.none, error_message=None, resource_type=i8(resource_type),
                    resource_name=name, configs=tuple(entries),
                ))
            except ControllerApiError as error:
                results.append(describe_response.DescribeConfigsResult(
                    error_code=error.error_code, error_message=error.message, resource_type=i8(resource_type),
                    resource_name=name, configs=(),
                ))
        return describe_response.DescribeConfigsResponse(
            throttle_time=i32Timedelta.parse(datetime.timedelta(0)), results=tuple(results),
        )

    def _describe(
        self, resource_type: int, name: str, epoch: int | None, include_synonyms: bool
    ) -> list[describe_response.DescribeConfigsResourceResult]:
        entries = []
        if resource_type == ConfigResourceType.TOPIC:
            layers = self._layers(name, epoch)
            for definition in sorted(TOPIC_CONFIGS.values(), key=lambda d: d.name):
                value, source, _ = resolve_topic_config(definition, **layers)
                synonyms: list[describe_response.DescribeConfigsSynonym] = []
                if include_synonyms:
                    synonyms = self._topic_synonyms(definition, layers)
                entries.append(_entry(definition.name, value, source, definition.type, synonyms))
            return entries
        node = self.configs(resource_type, name, epoch) if name else {}
        cluster = self.configs(resource_type, "", epoch)
        names = sorted(set(node) | set(cluster) | set(self._static_config) | {
            d.synonyms[0] for d in TOPIC_CONFIGS.values() if d.synonyms
        })
        for key in names:
            broker_definition = broker_config(key)
            chain = [(node, ConfigSource.DYNAMIC_BROKER_CONFIG), (cluster, ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                     (self._static_config, ConfigSource.STATIC_BROKER_CONFIG)]
            found = [(layer[key], source) for layer, source in chain if key in layer]
            if broker_definition is not None and broker_definition.default is not None:
                found.append((broker_definition.default, ConfigSource.DEFAULT_CONFIG))
            if not found:
                continue
            value, source = found[0]
            synonyms = [describe_response.DescribeConfigsSynonym(name=key, value=v, source=i8(s))
                        for v, s in found] if include_synonyms else []
            entries.append(_entry(key, value, source,
                                  broker_definition.type if broker_definition else ConfigType.STRING,
                                  synonyms))
        return entries

    def _topic_synonyms(
        self, definition: ConfigDef, layers: Mapping[str, Mapping[str, str]]
    ) -> list[describe_response.DescribeConfigsSynonym]:
        found: list[tuple[str, str | None, ConfigSource]] = []
        if definition.name in layers["topic"]:
            found.append((definition.name, layers["topic"][definition.name], ConfigSource.DYNAMIC_TOPIC_CONFIG))
        for layer, source in (("node", ConfigSource.DYNAMIC_BROKER_CONFIG),
                              ("cluster", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
                              ("static", ConfigSource.STATIC_BROKER_CONFIG)):
            for synonym in definition.synonyms:
                if synonym in layers[layer]:
                    found.append((synonym, layers[layer][synonym], source))
        found.append((definition.synonyms[0] if definition.synonyms else definition.name, definition.default,
                      ConfigSource.DEFAULT_CONFIG))
        return [describe_response.DescribeConfigsSynonym(name=n, value=v, source=i8(s)) for n, v, s in found]


def _entry(
    name: str, value: str | None, source: ConfigSource, kind: ConfigType,
    synonyms: Sequence[describe_response.DescribeConfigsSynonym],
) -> describe_response.DescribeConfigsResourceResult:
    return describe_response.DescribeConfigsResourceResult(
        name=name, value=value, read_only=False, config_source=i8(source), is_sensitive=False,
        synonyms=tuple(synonyms), config_type=i8(kind), documentation=None,
    )
