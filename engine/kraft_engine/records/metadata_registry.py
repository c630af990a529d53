"""Which metadata record is which: api keys, versions, conversions between versions, and Kafka's JSON.

The engine builds and replays the latest version of every record (`TopicRecord`, `PartitionRecord`,
...), while the log holds whatever version the metadata.version of the day required. This module is
the bridge, following the rules of Kafka's generated message code:

- writing at an older version drops the fields that version lacks, but refuses a non-default value
  in such a field (Kafka's "Attempted to write a non-default ... at version N"), because dropping it
  would silently lose metadata;
- reading an older version fills the missing fields with their defaults.

It also renders records as Kafka's `kafka-dump-log --cluster-metadata-decoder` does:
`{"type":"TOPIC_RECORD","version":0,"data":{...}}` with camelCase field names, Uuids in Kafka's
base64 form, bytes in base64, and tagged fields only when they differ from their default.
"""

from __future__ import annotations

import base64
import dataclasses
import types
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, get_args, get_origin

from kraft_engine.errors import RecordsError
from kraft_engine.kafka_uuid import ZERO_UUID, to_kafka_str
from kraft_engine.records.metadata_records import METADATA_RECORD_VERSIONS, MetadataRecord


class MetadataRecordError(RecordsError, ValueError):
    """A metadata record that cannot be encoded or decoded; the message says why."""


class UnknownRecordTypeError(MetadataRecordError):
    pass


class UnsupportedRecordVersionError(MetadataRecordError):
    pass


def _kafka_type_name(name: str) -> str:
    """Kafka's MetadataRecordType constant: toSnakeCase(name).toUpperCase()."""
    out = []
    previous_capital = True
    for char in name:
        if char.isupper():
            if not previous_capital:
                out.append("_")
            previous_capital = True
        else:
            previous_capital = False
        out.append(char.upper())
    return "".join(out)


@dataclass(frozen=True, slots=True)
class MetadataRecordType:
    api_key: int
    name: str
    """The schema name, e.g. "TopicRecord"."""
    type_name: str
    """Kafka's MetadataRecordType constant, e.g. "TOPIC_RECORD", as dump-log prints it."""
    version_classes: tuple[type[Any], ...]
    """The class of each version, index = version; the last is the latest."""

    @property
    def lowest_version(self) -> int:
        return 0

    @property
    def highest_version(self) -> int:
        return len(self.version_classes) - 1

    @property
    def latest_class(self) -> type[Any]:
        return self.version_classes[-1]

    def class_for_version(self, version: int) -> type[Any]:
        if not 0 <= version <= self.highest_version:
            raise UnsupportedRecordVersionError(
                f"{self.name} version {version} is not supported (versions 0..{self.highest_version})"
            )
        return self.version_classes[version]


METADATA_RECORD_TYPES: Mapping[int, MetadataRecordType] = types.MappingProxyType(
    {
        api_key: MetadataRecordType(
            api_key=api_key,
            name=classes[-1].__name__,
            type_name=_kafka_type_name(classes[-1].__name__),
            version_classes=classes,
        )
        for api_key, classes in METADATA_RECORD_VERSIONS.items()
    }
)
"""api key -> record type, for every metadata record Kafka defines."""

_VERSION_OF_CLASS: dict[type[Any], tuple[MetadataRecordType, int]] = {
    cls: (record_type, version)
    for record_type in METADATA_RECORD_TYPES.values()
    for version, cls in enumerate(record_type.version_classes)
}


def record_type_for_api_key(api_key: int) -> MetadataRecordType:
    try:
        return METADATA_RECORD_TYPES[api_key]
    except KeyError:
        raise UnknownRecordTypeError(f"unknown metadata record api key {api_key}") from None


def record_type_of(record: object) -> MetadataRecordType:
    """The record type of a record of any version."""
    return _class_version(record)[0]


def record_version_of(record: object) -> int:
    """The version a record object models: the latest for `TopicRecord`, n for `...V<n>`."""
    return _class_version(record)[1]


def _class_version(record: object) -> tuple[MetadataRecordType, int]:
    try:
        return _VERSION_OF_CLASS[type(record)]
    except KeyError:
        raise TypeError(f"{type(record).__name__} is not a metadata record") from None


@dataclass(frozen=True, slots=True)
class _DowngradePlan:
    """How to write a latest-class record at an older version: the fields that version keeps, and
    the (name, default, Kafka name) of those it lacks, which must hold their defaults."""

    target: type[Any]
    kept: tuple[str, ...]
    dropped: tuple[tuple[str, Any, str], ...]


_DOWNGRADE_PLANS: dict[tuple[type[Any], int], _DowngradePlan] = {}


def _downgrade_plan(latest: type[Any], target: type[Any], version: int) -> _DowngradePlan:
    key = (latest, version)
    plan = _DOWNGRADE_PLANS.get(key)
    if plan is None:
        target_names = {field.name for field in dataclasses.fields(target)}
        fields = dataclasses.fields(latest)
        plan = _DowngradePlan(
            target=target,
            kept=tuple(f.name for f in fields if f.name in target_names),
            dropped=tuple((f.name, f.default, f.metadata["kafka_name"]) for f in fields if f.name not in target_names),
        )
        _DOWNGRADE_PLANS[key] = plan
    return plan


def to_version(record: object, version: int) -> Any:
    """`record` as an instance of the class of `version`, refusing to drop non-default values."""
    record_type, current = _class_version(record)
    target = record_type.class_for_version(version)
    if current == version:
        return record
    latest = to_latest(record)
    plan = _downgrade_plan(type(latest), target, version)
    for name, default, kafka_name in plan.dropped:
        value = getattr(latest, name)
        if value != default:
            raise UnsupportedRecordVersionError(
                f"{record_type.name} version {version} has no field {kafka_name}; "
                f"cannot write the non-default value {value!r}"
            )
    return target(**{name: getattr(latest, name) for name in plan.kept})


def lowest_version_holding(record: object) -> int:
    """The lowest version that can carry every non-default value of `record`.

    Kafka picks BrokerRegistrationChangeRecord's version this way (0 to fence or unfence, 1 for
    controlled shutdown, 2 for log directories); records whose version follows metadata.version
    take it from `MetadataVersion` instead.
    """
    record_type = record_type_of(record)
    for version in range(record_type.highest_version):
        try:
            to_version(record, version)
        except UnsupportedRecordVersionError:
            continue
        return version
    return record_type.highest_version


def to_latest(record: object) -> MetadataRecord:
    """A record of any version as the latest version's class, missing fields at their defaults."""
    record_type, version = _class_version(record)
    if version == record_type.highest_version:
        latest: MetadataRecord = record  # type: ignore[assignment]
        return latest
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        names = _FIELD_NAMES[type(record)] = tuple(f.name for f in dataclasses.fields(record))  # type: ignore[arg-type]
    upgraded: MetadataRecord = record_type.latest_class(**{name: getattr(record, name) for name in names})
    return upgraded


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


# --- Normalising what kio's reader returns -----------------------------------------------------

# kio's reader returns None for an all-zero Uuid even where the schema does not allow null. Kafka
# reads such a field as Uuid.ZERO_UUID, and so does the engine, so decoded records compare equal to
# the records that were encoded.


def _struct_class(annotation: Any) -> type[Any] | None:
    """The dataclass in an annotation like `S`, `S | None`, `tuple[S, ...]`, if any."""
    if get_origin(annotation) in (types.UnionType, tuple):
        for argument in get_args(annotation):
            found = _struct_class(argument)
            if found is not None:
                return found
        return None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    return None


def _is_nullable(annotation: Any) -> bool:
    return get_origin(annotation) is types.UnionType and type(None) in get_args(annotation)


# What to look at in a decoded entity of one class, worked out once per class from its dataclass
# fields (re-introspecting the fields for every record was most of the cost of decoding).
_UUID = 0  # a non-nullable Uuid: None becomes ZERO_UUID
_UUIDS = 1  # an array of Uuids: None items become ZERO_UUID
_STRUCT = 2  # a nested struct or an array of them, normalised in turn
_NormalisePlan = tuple[tuple[str, int], ...]
_NORMALISE_PLANS: dict[type[Any], _NormalisePlan] = {}


def _normalise_plan(cls: type[Any]) -> _NormalisePlan:
    plan = _NORMALISE_PLANS.get(cls)
    if plan is None:
        steps: list[tuple[str, int]] = []
        for field in dataclasses.fields(cls):
            if field.metadata.get("kafka_type") == "uuid":
                if get_origin(field.type) is tuple:
                    steps.append((field.name, _UUIDS))
                elif not _is_nullable(field.type):
                    steps.append((field.name, _UUID))
                else:
                    steps.append((field.name, _UUIDS))  # a nullable Uuid array, or a nullable Uuid
            else:
                nested = _struct_class(field.type)
                if nested is not None and _normalise_plan(nested):
                    steps.append((field.name, _STRUCT))
        plan = _NORMALISE_PLANS[cls] = tuple(steps)
    return plan


def normalise_decoded(entity: Any) -> Any:
    """Replace kio's None-for-zero Uuids with ZERO_UUID where the field is not nullable."""
    plan = _NORMALISE_PLANS.get(type(entity))
    if plan is None:
        plan = _normalise_plan(type(entity))
    if not plan:
        return entity
    changes: dict[str, Any] = {}
    for name, kind in plan:
        value = getattr(entity, name)
        if kind == _UUID:
            if value is None:
                changes[name] = ZERO_UUID
        elif value is None:
            continue
        elif kind == _UUIDS:
            if isinstance(value, tuple) and None in value:
                changes[name] = tuple(ZERO_UUID if item is None else item for item in value)
        elif isinstance(value, tuple):  # an array of structs
            items = tuple(normalise_decoded(item) for item in value)
            if any(new is not old for new, old in zip(items, value, strict=True)):
                changes[name] = items
        else:
            normalised = normalise_decoded(value)
            if normalised is not value:
                changes[name] = normalised
    return dataclasses.replace(entity, **changes) if changes else entity


# --- Kafka's JSON rendering --------------------------------------------------------------------


def _lower_first(name: str) -> str:
    return name[:1].lower() + name[1:]


def _json_value(value: object) -> object:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, uuid.UUID):
        return to_kafka_str(value)
    if isinstance(value, bytes):
        # Jackson renders a BinaryNode as standard base64 with padding.
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, tuple):
        return [_json_value(item) for item in value]
    if dataclasses.is_dataclass(value):
        return _entity_json(value)
    raise TypeError(f"cannot render {type(value).__name__} as Kafka JSON")


def _entity_json(entity: Any) -> dict[str, object]:
    rendered: dict[str, object] = {}
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if "tag" in field.metadata and value == field.default:
            continue
        rendered[_lower_first(field.metadata["kafka_name"])] = _json_value(value)
    return rendered


def record_to_json(record: object, version: int | None = None) -> dict[str, object]:
    """The JSON object Kafka's dump-log prints for `record` written at `version` (default: the
    version of the record's class). Serialise it compactly, e.g.
    `json.dumps(obj, separators=(",", ":"), ensure_ascii=False)`, to match Jackson's output."""
    record_type, own_version = _class_version(record)
    if version is None:
        version = own_version
    return {
        "type": record_type.type_name,
        "version": version,
        "data": _entity_json(to_version(record, version)),
    }
