"""Tagged fields a reader does not know are skipped, as Kafka's readers skip them.

A flexible Kafka message ends every struct with a section of tagged fields: optional fields a
newer writer may add without a new version. Kafka's generated readers keep a tag they do not know
among the message's "unknown tagged fields" and otherwise ignore it, so an older broker serves a
newer client's request and replays a newer controller's metadata record. kio 0.6.5's native
reader refuses such a tag instead (a KeyError, "Unknown tagged field tag"); it has no option to
skip them. So `tolerant_reader` wraps kio's reader: when it fails with a KeyError, the entity's
bytes are rewritten without the tagged fields the schema of that struct does not name (at every
depth: nested structs, array items, known tagged fields that are structs) and read again. A
rewrite that drops nothing, or bytes that do not walk (truncated, corrupt), leave kio's own
error to the caller, so a malformed message is refused exactly as before.

The walk reads every value with kio's own field readers, so it agrees with kio on every
encoding; it runs only after kio refused the bytes, never on the common path. Pure.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import Field, fields
from typing import Any

from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag, is_optional
from kio.serial._parse import get_field_reader
from kio.serial.readers import (
    read_compact_array_length,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)
from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint

from kraft_engine.errors import RecordsError

__all__ = ["UnknownTagsError", "tolerant_reader", "without_unknown_tagged_fields"]

Reader = Callable[[Any, int], tuple[Any, int]]
_Copy = Callable[[memoryview, int, io.BytesIO], tuple[int, int]]
"""`copy(buffer, position, out) -> (position after the value, unknown tags dropped)`."""

_NULL_MARKER = -1


class UnknownTagsError(RecordsError, ValueError):
    """The bytes do not walk as the entity (truncated or corrupt)."""


def _raw(read: Reader) -> _Copy:
    def copy(buffer: memoryview, pos: int, out: io.BytesIO) -> tuple[int, int]:
        _value, size = read(buffer, pos)
        out.write(buffer[pos:pos + size])
        return pos + size, 0

    return copy


def _nullable(copy_entity: _Copy) -> _Copy:
    def copy(buffer: memoryview, pos: int, out: io.BytesIO) -> tuple[int, int]:
        marker, size = read_int8(buffer, pos)
        out.write(buffer[pos:pos + size])
        if marker == _NULL_MARKER:
            return pos + size, 0
        return copy_entity(buffer, pos + size, out)

    return copy


def _array(copy_item: _Copy, *, flexible: bool) -> _Copy:
    read_length: Callable[[memoryview, int], tuple[int | None, int]] = (
        read_compact_array_length if flexible else read_legacy_array_length
    )

    def copy(buffer: memoryview, pos: int, out: io.BytesIO) -> tuple[int, int]:
        count, size = read_length(buffer, pos)
        out.write(buffer[pos:pos + size])
        pos += size
        dropped = 0
        for _ in range(max(count or 0, 0)):
            pos, more = copy_item(buffer, pos, out)
            dropped += more
        return pos, dropped

    return copy


def _field_copy(entity_type: type[Any], f: Field[Any], *, tagged: bool) -> _Copy:
    kind = classify_field(f)
    if isinstance(kind, EntityField):
        nested = _entity_copy(kind.type_)
        return _nullable(nested) if is_optional(f) and not tagged else nested
    if isinstance(kind, EntityTupleField):
        return _array(_entity_copy(kind.type_), flexible=bool(entity_type.__flexible__))
    return _raw(get_field_reader(entity_type, f, entity_type.__name__ == "RequestHeader", tagged))


_COPIES: dict[type[Any], _Copy] = {}


def _entity_copy(entity_type: type[Any]) -> _Copy:
    """The copy function of an entity class, compiled once (registered before its fields are
    compiled, so a struct nested in itself would not recurse forever)."""
    found = _COPIES.get(entity_type)
    if found is not None:
        return found
    regular: list[_Copy] = []
    known: dict[int, _Copy] = {}

    def copy_entity(buffer: memoryview, pos: int, out: io.BytesIO) -> tuple[int, int]:
        dropped = 0
        for step in regular:
            pos, more = step(buffer, pos, out)
            dropped += more
        if not entity_type.__flexible__:
            return pos, dropped
        count, size = read_unsigned_varint(buffer, pos)
        pos += size
        kept = io.BytesIO()
        kept_count = 0
        for _ in range(count):
            tag, size = read_unsigned_varint(buffer, pos)
            pos += size
            length, size = read_unsigned_varint(buffer, pos)
            pos += size
            end = pos + length
            if end > len(buffer):
                raise UnknownTagsError(f"tagged field {tag} of {length} bytes overruns the buffer")
            copy = known.get(tag)
            if copy is None:
                dropped += 1
            else:
                value = io.BytesIO()
                value_end, more = copy(buffer[:end], pos, value)
                if value_end != end:
                    raise UnknownTagsError(f"tagged field {tag} holds {length} bytes, its value {value_end - pos}")
                dropped += more
                encoded = value.getvalue()
                write_unsigned_varint(kept, uvarint(tag))
                write_unsigned_varint(kept, uvarint(len(encoded)))
                kept.write(encoded)
                kept_count += 1
            pos = end
        write_unsigned_varint(out, uvarint(kept_count))
        out.write(kept.getvalue())
        return pos, dropped

    _COPIES[entity_type] = copy_entity
    for f in fields(entity_type):
        tag = get_field_tag(f)
        step = _field_copy(entity_type, f, tagged=tag is not None)
        if tag is None:
            regular.append(step)
        else:
            known[int(tag)] = step
    return copy_entity


def without_unknown_tagged_fields(entity_type: type[Any], buffer: Any, offset: int = 0) -> tuple[bytes, int, int]:
    """The `entity_type` encoded at `offset` in `buffer`, re-encoded without the tagged fields its
    schema does not name: (those bytes, where the entity ends in `buffer`, tags dropped). Raises
    UnknownTagsError when the bytes do not walk as the entity."""
    view = memoryview(buffer).cast("B")
    out = io.BytesIO()
    try:
        end, dropped = _entity_copy(entity_type)(view, offset, out)
    except UnknownTagsError:
        raise
    except Exception as error:  # kio's readers: ValueError, DecodeError, IndexError on short bytes
        raise UnknownTagsError(f"{entity_type.__name__} does not walk: {error}") from error
    return out.getvalue(), end, dropped


_TOLERANT: dict[type[Any], Reader] = {}


def tolerant_reader(entity_type: type[Any]) -> Reader:
    """kio's reader for `entity_type`, skipping tagged fields the schema does not name (see the
    module docstring): `reader(buffer, offset) -> (entity, size)`, the size counted in the bytes
    as given (the unknown tags included). One per class, made once."""
    found = _TOLERANT.get(entity_type)
    if found is None:
        found = _TOLERANT[entity_type] = _make_tolerant_reader(entity_type)
    return found


def _make_tolerant_reader(entity_type: type[Any]) -> Reader:
    read: Reader = entity_reader(entity_type)
    if not entity_type.__flexible__:  # no tagged sections, here or in its nested structs
        return read

    def read_tolerantly(buffer: Any, offset: int) -> tuple[Any, int]:
        try:
            return read(buffer, offset)
        except KeyError as refused:  # kio: "Unknown tagged field tag"
            try:
                cleaned, end, dropped = without_unknown_tagged_fields(entity_type, buffer, offset)
            except UnknownTagsError:
                raise refused from None
            if not dropped:
                raise
            entity, _size = read(cleaned, 0)
            return entity, end - offset

    return read_tolerantly
