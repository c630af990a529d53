"""The Arrow schema of a decoded record, derived from the engine's own record classes.

A row's `record` column is a struct with one field per record type (`TopicRecord`,
`PartitionChangeRecord`, ..., and the raft control records `LeaderChangeMessage`, `VotersRecord`,
...), each a struct of that record's fields with their Kafka types: int32 stays int32, an array of
int32 is a list of int32, a Uuid is its Kafka text form. Exactly one of them is set on a row. The
types come from the classes `kraft_engine.records` decodes into (their field metadata and type
hints), so a record type or field added to the engine appears here without a second copy.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.leader_change_message.v0 import LeaderChangeMessage
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord

from kraft_engine.kafka_uuid import from_kafka_str, to_kafka_str
from kraft_engine.records import METADATA_RECORD_TYPES

__all__ = [
    "CONTROL_RECORD_CLASSES",
    "RECORD_CLASSES",
    "RECORD_STRUCT",
    "record_from_struct_value",
    "record_struct_array",
]

CONTROL_RECORD_CLASSES: tuple[type[Any], ...] = (
    LeaderChangeMessage,
    SnapshotHeaderRecord,
    SnapshotFooterRecord,
    KRaftVersionRecord,
    VotersRecord,
)

# Record type name (the schema name) -> the class every version decodes into.
RECORD_CLASSES: dict[str, type[Any]] = {
    **{t.name: t.latest_class for t in sorted(METADATA_RECORD_TYPES.values(), key=lambda t: t.api_key)},
    **{cls.__name__: cls for cls in CONTROL_RECORD_CLASSES},
}

_KAFKA_TYPES: dict[str, pa.DataType] = {
    "int8": pa.int8(),
    "int16": pa.int16(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "uint16": pa.int32(),  # Arrow's unsigned types have no Spark counterpart: widen
    "uint32": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "uuid": pa.string(),
    "bytes": pa.binary(),
    "records": pa.binary(),
}
# kio's primitive NewTypes (i8, u16, ...) by name, for fields without kafka_type metadata.
_KIO_PRIMITIVES = {
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "int16", "u16": "uint16", "u32": "uint32", "u64": "int64", "f64": "float64",
}


def _is_optional(hint: Any) -> tuple[Any, bool]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return hint, False


def _scalar_kafka_type(hint: Any, declared: str | None) -> str:
    if declared in _KAFKA_TYPES:
        return declared
    while hasattr(hint, "__supertype__"):
        if getattr(hint, "__name__", "") in _KIO_PRIMITIVES:
            return _KIO_PRIMITIVES[hint.__name__]
        hint = hint.__supertype__
    if hint is bool:
        return "bool"
    if hint is str:
        return "string"
    if hint is uuid.UUID:
        return "uuid"
    if hint is bytes:
        return "bytes"
    if hint is float:
        return "float64"
    if hint is int:
        return "int64"
    raise TypeError(f"no Arrow type for {hint!r} (kafka type {declared!r})")


def _arrow_type(hint: Any, declared: str | None) -> pa.DataType:
    hint, _ = _is_optional(hint)
    if typing.get_origin(hint) is tuple:
        return pa.list_(_arrow_type(typing.get_args(hint)[0], declared))
    if dataclasses.is_dataclass(hint):
        return _struct_of(hint)
    return _KAFKA_TYPES[_scalar_kafka_type(hint, declared)]


def _struct_of(cls: Any) -> pa.StructType:
    hints = typing.get_type_hints(cls)
    return pa.struct(
        [
            pa.field(f.name, _arrow_type(hints[f.name], f.metadata.get("kafka_type")), nullable=True)
            for f in dataclasses.fields(cls)
        ]
    )


RECORD_STRUCT: pa.StructType = pa.struct(
    [pa.field(name, _struct_of(cls), nullable=True) for name, cls in RECORD_CLASSES.items()]
)
"""One field per record type; a row sets the one its record is."""


_Convert = Callable[[Any], Any]
# Uuids repeat through a log (topic, directory, incarnation ids): their text form is made once.
_uuid_text = functools.lru_cache(maxsize=1 << 16)(to_kafka_str)


def _field_converter(hint: Any) -> _Convert | None:
    """How a field of this type becomes what Arrow's from_pylist takes (dicts, lists, Uuids in
    Kafka's text form); None when the value goes as it is (ints, strings, bytes, booleans)."""
    hint, _ = _is_optional(hint)
    if typing.get_origin(hint) is tuple:
        item = _field_converter(typing.get_args(hint)[0])
        if item is None:
            return lambda v: None if v is None else list(v)
        return lambda v: None if v is None else [item(x) for x in v]
    if dataclasses.is_dataclass(hint):
        return _converter(hint)
    if hint is uuid.UUID:
        return lambda v: None if v is None else _uuid_text(v)
    return None


_CONVERTERS: dict[Any, _Convert] = {}


def _converter(cls: Any) -> _Convert:
    """One record class's converter, built once from its type hints (the same hints the Arrow
    struct is derived from), so decoding a record does no per-value type inspection."""
    known = _CONVERTERS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _field_converter(hints[f.name])) for f in dataclasses.fields(cls)]
    as_is = [name for name, convert in fields if convert is None]
    converted = [(name, convert) for name, convert in fields if convert is not None]

    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = {name: getattr(value, name) for name in as_is}
        for name, field_convert in converted:
            out[name] = field_convert(getattr(value, name))
        return out

    _CONVERTERS[cls] = convert
    return convert


def record_struct_array(records: Sequence[tuple[str, object] | None]) -> pa.StructArray:
    """The `record` column of rows holding these decoded records ((type name, record), or None
    for a row without one), built a record type at a time: one child array per type present,
    nulls for the others, never a dict of every type per row."""
    rows_of: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        if record is not None:
            rows_of.setdefault(record[0], []).append(index)
    length = len(records)
    children = []
    for field in RECORD_STRUCT:
        indexes = rows_of.get(field.name)
        if indexes is None:
            children.append(pa.nulls(length, field.type))
            continue
        values: list[Any] = [None] * length
        for index in indexes:
            entity = records[index][1]  # type: ignore[index]
            values[index] = _converter(type(entity))(entity)
        children.append(pa.array(values, type=field.type))
    missing = pa.array([record is None for record in records], type=pa.bool_())
    return pa.StructArray.from_arrays(children, fields=list(RECORD_STRUCT), mask=missing)


def _field_builder(hint: Any) -> _Convert | None:
    """How a field's struct value becomes the engine's value again (tuples, entities, Uuids);
    None when it goes as it is (ints, strings, bytes, booleans)."""
    hint, _ = _is_optional(hint)
    if typing.get_origin(hint) is tuple:
        item = _field_builder(typing.get_args(hint)[0])
        if item is None:
            return lambda v: None if v is None else tuple(v)
        return lambda v: None if v is None else tuple(item(x) for x in v)
    if dataclasses.is_dataclass(hint):
        return _builder(hint)
    if hint is uuid.UUID:
        return lambda v: None if v is None else from_kafka_str(v)
    return None


_BUILDERS: dict[Any, _Convert] = {}


def _builder(cls: Any) -> _Convert:
    """One record class's inverse of `_converter`, built once from the same type hints (a
    record rebuilt per row must not inspect its class's hints per row)."""
    known = _BUILDERS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    fields = [(f.name, _field_builder(hints[f.name])) for f in dataclasses.fields(cls)]
    as_is = [name for name, build in fields if build is None]
    built = [(name, build) for name, build in fields if build is not None]

    def build(value: Any) -> Any:
        if value is None:
            return None
        kwargs = {name: value[name] for name in as_is}
        for name, field_build in built:
            kwargs[name] = field_build(value[name])
        return cls(**kwargs)

    _BUILDERS[cls] = build
    return build


def record_from_struct_value(type_name: str, value: dict[str, Any]) -> object:
    """The engine's record object back from a row's `record` column (the inverse of
    a `record_struct_array` value), so derivations replay records with the engine's own code."""
    return _builder(RECORD_CLASSES[type_name])(value[type_name])
