"""A compiled writer for kio entities: the same bytes as kio's `entity_writer`, at a fraction of its cost.

kio's generic writer walks each entity's fields through small writer functions that construct
phantom-typed integers (`uvarint(...)`, whose `isinstance` checks dominate) and a fresh BytesIO per
tagged field. The controller encodes every metadata record it writes (one PartitionChangeRecord per
partition when a broker is fenced: 100,000 at 100k partitions) and every record of a snapshot, so the
generic writer was the largest single cost of fencing a broker. This module builds, once per entity
class, a plan from kio's own field metadata (`kafka_type`, tags, tagged-field defaults, optionality)
and writes into one `bytearray` with precompiled `struct`s. Field kinds it does not special-case
(timedeltas, datetimes) go through kio's writer for that field, so every entity kio can write, this
writes identically (`tests/records/test_fast_writer.py` checks byte equality against kio).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import MISSING, fields
from functools import cache
from typing import IO, Any, Final, cast

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_writer

__all__ = ["encode_entity", "entity_writer_into"]

FieldWriter = Callable[[bytearray, Any], None]

_INT8: Final = struct.Struct(">b")
_INT16: Final = struct.Struct(">h")
_INT32: Final = struct.Struct(">i")
_INT64: Final = struct.Struct(">q")
_UINT8: Final = struct.Struct(">B")
_UINT16: Final = struct.Struct(">H")
_UINT32: Final = struct.Struct(">I")
_UINT64: Final = struct.Struct(">Q")
_FLOAT64: Final = struct.Struct(">d")
_ZERO_UUID: Final = bytes(16)
_UVARINT_MAX: Final = 2**31 - 1


class _Sink:
    """A `write(bytes)` view of a bytearray, for the kio writers this module does not replace."""

    __slots__ = ("write",)

    def __init__(self, out: bytearray) -> None:
        self.write = out.extend


def write_uvarint(out: bytearray, value: int) -> None:
    """An unsigned varint, refusing what kio's `uvarint` refuses (negative or above 2**31 - 1)."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint {value} is negative")
        out.append(value)
        return
    if value > _UVARINT_MAX:
        raise ValueError(f"unsigned varint {value} is above {_UVARINT_MAX}")
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _packer(packer: struct.Struct) -> FieldWriter:
    pack = packer.pack

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return write


def _write_bool(out: bytearray, value: Any) -> None:
    out.append(1 if value else 0)


def _write_uuid(out: bytearray, value: Any) -> None:
    out += _ZERO_UUID if value is None else value.bytes


def _write_error_code(out: bytearray, value: Any) -> None:
    out += _INT16.pack(value.value)


def _write_compact_string(out: bytearray, value: Any) -> None:
    if value is None:
        raise TypeError("Unexpectedly received None value")
    data = value.encode() if isinstance(value, str) else value
    write_uvarint(out, len(data) + 1)
    out += data


def _write_nullable_compact_string(out: bytearray, value: Any) -> None:
    if value is None:
        out.append(0)
        return
    data = value.encode() if isinstance(value, str) else value
    write_uvarint(out, len(data) + 1)
    out += data


_PRIMITIVES: Final[dict[tuple[str, bool, bool], FieldWriter]] = {
    ("int8", False, False): _packer(_INT8),
    ("int16", False, False): _packer(_INT16),
    ("int32", False, False): _packer(_INT32),
    ("int64", False, False): _packer(_INT64),
    ("uint8", False, False): _packer(_UINT8),
    ("uint16", False, False): _packer(_UINT16),
    ("uint32", False, False): _packer(_UINT32),
    ("uint64", False, False): _packer(_UINT64),
    ("float64", False, False): _packer(_FLOAT64),
    ("bool", False, False): _write_bool,
    ("uuid", False, False): _write_uuid,
    ("uuid", False, True): _write_uuid,
    ("error_code", False, False): _write_error_code,
    ("string", True, False): _write_compact_string,
    ("string", True, True): _write_nullable_compact_string,
    ("bytes", True, False): _write_compact_string,
    ("bytes", True, True): _write_nullable_compact_string,
    ("records", True, False): _write_compact_string,
    ("records", True, True): _write_nullable_compact_string,
}


def _kio_primitive(kafka_type: str, *, flexible: bool, optional: bool) -> FieldWriter:
    writer = get_writer(kafka_type=kafka_type, flexible=flexible, optional=optional)

    def write(out: bytearray, value: Any) -> None:
        writer(cast(IO[bytes], _Sink(out)), value)

    return write


def _primitive(kafka_type: str, *, flexible: bool, optional: bool) -> FieldWriter:
    # Integer, bool and uuid encodings do not depend on flexibility; strings and bytes do.
    key = (kafka_type, kafka_type in ("string", "bytes", "records") and flexible, optional)
    if kafka_type in ("string", "bytes", "records") and not flexible:
        return _kio_primitive(kafka_type, flexible=flexible, optional=optional)
    return _PRIMITIVES.get(key) or _kio_primitive(kafka_type, flexible=flexible, optional=optional)


_PACKED_ARRAYS: Final = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I"}


@cache
def _packed(code: str, count: int) -> Callable[..., bytes]:
    return struct.Struct(f">{count}{code}").pack


def _packed_array(code: str, *, flexible: bool) -> FieldWriter:
    """An array of fixed-size integers, packed with one struct call."""

    def write(out: bytearray, items: Sequence[int] | None) -> None:
        if items is None:
            if flexible:
                out.append(0)
            else:
                out += _INT32.pack(-1)
            return
        count = len(items)
        if flexible:
            write_uvarint(out, count + 1)
        else:
            out += _INT32.pack(count)
        out += _packed(code, count)(*items)

    return write


def _array(item: FieldWriter, *, flexible: bool) -> FieldWriter:
    if flexible:

        def write_compact(out: bytearray, items: Sequence[Any] | None) -> None:
            if items is None:
                out.append(0)
                return
            write_uvarint(out, len(items) + 1)
            for value in items:
                item(out, value)

        return write_compact

    def write_legacy(out: bytearray, items: Sequence[Any] | None) -> None:
        if items is None:
            out += _INT32.pack(-1)
            return
        out += _INT32.pack(len(items))
        for value in items:
            item(out, value)

    return write_legacy


def _nullable_entity(writer: FieldWriter) -> FieldWriter:
    def write(out: bytearray, value: Any) -> None:
        if value is None:
            out += _INT8.pack(-1)
            return
        out += _INT8.pack(1)
        writer(out, value)

    return write


def _field_writer(field: Any, *, flexible: bool, is_tag: bool) -> FieldWriter:
    optional = False if is_tag else is_optional(field)
    field_class = classify_field(field)
    inner: FieldWriter
    match field_class:
        case PrimitiveField():
            inner = _primitive(get_schema_field_type(field), flexible=flexible, optional=optional)
        case PrimitiveTupleField():
            kafka_type = get_schema_field_type(field)
            if kafka_type in _PACKED_ARRAYS:
                return _packed_array(_PACKED_ARRAYS[kafka_type], flexible=flexible)
            inner = _primitive(kafka_type, flexible=flexible, optional=False)
        case EntityField(field_type):
            inner = _nullable_entity(entity_writer_into(field_type)) if optional else entity_writer_into(field_type)
        case EntityTupleField(field_type):
            inner = entity_writer_into(field_type)
        case _:  # pragma: no cover - kio's classification is closed
            raise TypeError(f"unknown field class {field_class!r} of {field.name}")
    return _array(inner, flexible=flexible) if field_class.is_array else inner


_WRITERS: dict[type[Any], FieldWriter] = {}


def entity_writer_into(entity_type: type[Any]) -> FieldWriter:
    """`write(out, entity)`: appends the entity's bytes to `out`, exactly as kio's `entity_writer`
    writes them. The plan is built once per class."""
    writer = _WRITERS.get(entity_type)
    if writer is None:
        writer = _WRITERS[entity_type] = _build(entity_type)
    return writer


def _build(entity_type: type[Any]) -> FieldWriter:
    if entity_type.__name__ == "RequestHeader":
        raise TypeError("RequestHeader has kio's special-cased client_id; use kio's writer")
    flexible = bool(entity_type.__flexible__)
    plain: list[tuple[str, FieldWriter]] = []
    tagged: list[tuple[int, str, FieldWriter, Any, Any]] = []
    for field in fields(entity_type):
        tag = get_field_tag(field)
        writer = _field_writer(field, flexible=flexible, is_tag=tag is not None)
        if tag is None:
            plain.append((field.name, writer))
        else:
            tagged.append((int(tag), field.name, writer, field.default, get_tagged_field_default(field)))
    if tagged and not flexible:
        raise ValueError("Found tagged fields on a non-flexible model")
    tagged.sort(key=lambda entry: entry[0])
    return _compile(entity_type.__name__, plain, tagged, flexible=flexible)


def _compile(
    name: str,
    plain: list[tuple[str, FieldWriter]],
    tagged: list[tuple[int, str, FieldWriter, Any, Any]],
    *,
    flexible: bool,
) -> FieldWriter:
    """One function per class, its fields unrolled: attribute reads and writer calls, no loop over a
    plan and, for a tagged field, one comparison against the value kio would skip it at (the field's
    default, or the kind's implicit default when there is none)."""
    namespace: dict[str, Any] = {"write_uvarint": write_uvarint, "bytearray": bytearray}
    lines = ["def write(out, e):"]
    for index, (field_name, writer) in enumerate(plain):
        namespace[f"w{index}"] = writer
        lines.append(f"    w{index}(out, e.{field_name})")
    if flexible and not tagged:
        lines.append("    out.append(0)")
    elif flexible:
        lines.append("    present = []")
        for index, (tag, field_name, writer, default, implicit) in enumerate(tagged):
            namespace[f"t{index}"] = writer
            namespace[f"s{index}"] = implicit if default is MISSING else default
            lines += [
                f"    v = e.{field_name}",
                f"    if not (v == s{index}):",
                "        b = bytearray()",
                f"        t{index}(b, v)",
                f"        present.append(({tag}, b))",
            ]
        lines += [
            "    write_uvarint(out, len(present))",
            "    for tag, b in present:",
            "        write_uvarint(out, tag)",
            "        write_uvarint(out, len(b))",
            "        out += b",
        ]
    if len(lines) == 1:
        lines.append("    pass")
    exec(compile("\n".join(lines), f"<fast_writer {name}>", "exec"), namespace)
    compiled: FieldWriter = namespace["write"]
    return compiled


def encode_entity(entity: Any) -> bytes:
    """The entity's bytes, as kio's `entity_writer(type(entity))` writes them."""
    out = bytearray()
    entity_writer_into(type(entity))(out, entity)
    return bytes(out)
