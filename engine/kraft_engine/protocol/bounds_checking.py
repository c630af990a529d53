"""A bounded pre-pass over untrusted bytes, before kio's native reader sees them.

kio 0.6.5's native reader sizes its vectors from the length an array declares before it checks
that the frame holds that many items: a 5-byte varint array length above 2^32 in a 73-byte
DescribeQuorum request makes it ask the allocator for 32 GiB, and Rust aborts the process
(`memory allocation of ... bytes failed`, exit -6). No Python `except` can catch an abort, so
every frame a peer sends is walked here first, driven by the same kio schema classes the reader
uses: each array count, string, bytes and tagged-field length (compact and non-compact
encodings) is checked against the bytes left in the frame before anything is read, and an array
count must fit the smallest encoding of its items. The walk allocates nothing per item and costs
one pass over the frame; a frame that passes is one kio can read without a large allocation
(a declared length is at most the bytes that remain).

docs/kio-native-reader-abort.md has the minimal reproducer to report upstream.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import Field, dataclass, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from kraft_engine.protocol.errors import MalformedFrame

__all__ = ["ArrayExtent", "check_entity_bounds", "entity_arrays"]

_Skip = Callable[[Any, int, int], int]
"""`skip(buffer, position, end) -> position after the value`; raises MalformedFrame."""

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
    "bool": 1, "int8": 1, "uint8": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}
_MAX_VARINT_BYTES = 5  # Kafka's ByteUtils.readUnsignedVarint refuses a sixth byte


def _fail(message: str) -> MalformedFrame:
    return MalformedFrame(message, part="body")


def _uvarint(buffer: Any, pos: int, end: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for _ in range(_MAX_VARINT_BYTES):
        if pos >= end:
            raise _fail("frame ends inside a varint")
        byte = buffer[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise _fail("varint longer than 5 bytes")


def _fixed(size: int) -> _Skip:
    def skip(buffer: Any, pos: int, end: int) -> int:
        pos += size
        if pos > end:
            raise _fail(f"frame ends inside a {size}-byte field")
        return pos

    return skip


def _legacy_sized(prefix: struct.Struct, *, nullable: bool, what: str) -> _Skip:
    width = prefix.size

    def skip(buffer: Any, pos: int, end: int) -> int:
        if pos + width > end:
            raise _fail(f"frame ends inside a {what} length")
        length: int = prefix.unpack_from(buffer, pos)[0]
        pos += width
        if length < 0:
            if length == -1 and nullable:
                return pos
            raise _fail(f"invalid {what} length {length}")
        if length > end - pos:
            raise _fail(f"{what} length {length} exceeds the {end - pos} bytes left")
        return pos + length

    return skip


def _compact_sized(*, nullable: bool, what: str) -> _Skip:
    def skip(buffer: Any, pos: int, end: int) -> int:
        encoded, pos = _uvarint(buffer, pos, end)
        if encoded == 0:
            if nullable:
                return pos
            raise _fail(f"null {what} where none is allowed")
        length = encoded - 1
        if length > end - pos:
            raise _fail(f"{what} length {length} exceeds the {end - pos} bytes left")
        return pos + length

    return skip


def _primitive(kafka_type: str, *, flexible: bool, nullable: bool) -> tuple[_Skip, int]:
    """The skip function of one primitive value and its smallest encoded size."""
    size = _FIXED_SIZES.get(kafka_type)
    if size is not None:
        return _fixed(size), size
    if kafka_type == "string":
        if flexible:
            return _compact_sized(nullable=nullable, what="string"), 1
        return _legacy_sized(_I16, nullable=nullable, what="string"), 2
    if kafka_type in ("bytes", "records"):
        if flexible:
            return _compact_sized(nullable=nullable, what=kafka_type), 1
        return _legacy_sized(_I32, nullable=nullable, what=kafka_type), 4
    raise NotImplementedError(f"no bounds check for kafka type {kafka_type!r}")


def _array(item: _Skip, item_min_size: int, *, flexible: bool, nullable: bool) -> _Skip:
    item_min_size = max(item_min_size, 1)

    def skip(buffer: Any, pos: int, end: int) -> int:
        if flexible:
            encoded, pos = _uvarint(buffer, pos, end)
            count = encoded - 1
        else:
            if pos + 4 > end:
                raise _fail("frame ends inside an array length")
            (count,) = _I32.unpack_from(buffer, pos)
            pos += 4
        if count < 0:
            if count == -1 and nullable:
                return pos
            raise _fail(f"invalid array length {count}")
        if count * item_min_size > end - pos:
            raise _fail(f"array of {count} items cannot fit the {end - pos} bytes left")
        for _ in range(count):
            pos = item(buffer, pos, end)
        return pos

    return skip


def _nullable_entity(entity: _Skip) -> _Skip:
    def skip(buffer: Any, pos: int, end: int) -> int:
        if pos >= end:
            raise _fail("frame ends inside a nullable struct marker")
        marker = buffer[pos]
        pos += 1
        if marker == 0xFF:  # int8 -1: null
            return pos
        if marker != 1:
            raise _fail(f"invalid nullable struct marker {marker}")
        return entity(buffer, pos, end)

    return skip


def _optional_inner(hint: Any) -> tuple[Any, bool]:
    if get_origin(hint) in (UnionType, Union):
        args = [a for a in get_args(hint) if a is not NoneType]
        return args[0], len(args) != len(get_args(hint))
    return hint, False


def _field(entity_type: type[Any], f: Field[Any], hint: Any, *, tagged: bool) -> tuple[_Skip, int]:
    flexible = bool(entity_type.__flexible__)
    if entity_type.__name__ == "RequestHeader" and f.name == "client_id":
        # Kafka keeps the header's client id a legacy nullable string even in header v2.
        return _legacy_sized(_I16, nullable=True, what="string"), 2
    inner, optional = _optional_inner(hint)
    optional = optional and not tagged  # as kio: a tagged field's absence is its null
    if get_origin(inner) is tuple:
        item_type = get_args(inner)[0]
        item_inner, _ = _optional_inner(item_type)
        if isinstance(item_inner, type) and is_dataclass(item_inner):
            item_skip, item_min = _entity_plan(item_inner)
        else:
            item_skip, item_min = _primitive(f.metadata["kafka_type"], flexible=flexible, nullable=False)
        return _array(item_skip, item_min, flexible=flexible, nullable=optional), (1 if flexible else 4)
    if isinstance(inner, type) and is_dataclass(inner):
        entity_skip, entity_min = _entity_plan(inner)
        if optional:
            return _nullable_entity(entity_skip), 1
        return entity_skip, entity_min
    return _primitive(f.metadata["kafka_type"], flexible=flexible, nullable=optional)


_PLANS: dict[type[Any], tuple[_Skip, int]] = {}
_TOP_LEVEL: dict[type[Any], tuple[tuple[str, _Skip, type[Any] | None], ...]] = {}


def _entity_plan(entity_type: type[Any]) -> tuple[_Skip, int]:
    """The skip function of an entity class and its smallest encoded size, compiled once."""
    plan = _PLANS.get(entity_type)
    if plan is None:
        plan = _PLANS[entity_type] = _compile_entity(entity_type)
    return plan


def _compile_entity(entity_type: type[Any]) -> tuple[_Skip, int]:
    hints = get_type_hints(entity_type)
    regular: list[_Skip] = []
    tagged: dict[int, _Skip] = {}
    min_size = 0
    for f in fields(entity_type):
        tag = f.metadata.get("tag")
        skip, size = _field(entity_type, f, hints[f.name], tagged=tag is not None)
        if tag is None:
            regular.append(skip)
            min_size += size
        else:
            tagged[int(tag)] = skip
    flexible = bool(entity_type.__flexible__)
    if flexible:
        min_size += 1
    steps = tuple(regular)

    def skip_entity(buffer: Any, pos: int, end: int) -> int:
        for step in steps:
            pos = step(buffer, pos, end)
        if not flexible:
            return pos
        count, pos = _uvarint(buffer, pos, end)
        if count * 2 > end - pos:  # a tag and its size take a byte each at least
            raise _fail(f"{count} tagged fields cannot fit the {end - pos} bytes left")
        for _ in range(count):
            tag, pos = _uvarint(buffer, pos, end)
            size, pos = _uvarint(buffer, pos, end)
            if size > end - pos:
                raise _fail(f"tagged field {tag} of {size} bytes exceeds the {end - pos} bytes left")
            value_end = pos + size
            known = tagged.get(tag)
            if known is not None and known(buffer, pos, value_end) > value_end:
                raise _fail(f"tagged field {tag} overruns its {size} bytes")
            pos = value_end
        return pos

    return skip_entity, min_size


def check_entity_bounds(entity_type: type[Any], buffer: bytes | memoryview, offset: int = 0) -> int:
    """Walk one `entity_type` encoded at `offset` without decoding it; return where it ends.

    Raises MalformedFrame (part "body") when a declared length or count exceeds what is left of
    `buffer`, a varint is longer than 5 bytes, or the frame ends inside a value."""
    skip, _ = _entity_plan(entity_type)
    end: int = skip(buffer, offset, len(buffer))
    return end


@dataclass(frozen=True, slots=True)
class ArrayExtent:
    """Where one top-level array of entities lies in a checked frame."""

    name: str
    item_type: type[Any]
    count: int
    start: int
    """Offset of the array's length prefix."""
    items_start: int
    end: int


def _top_level_fields(entity_type: type[Any]) -> tuple[tuple[str, _Skip, type[Any] | None], ...]:
    cached = _TOP_LEVEL.get(entity_type)
    if cached is None:
        cached = _TOP_LEVEL[entity_type] = _compile_top_level(entity_type)
    return cached


def _compile_top_level(entity_type: type[Any]) -> tuple[tuple[str, _Skip, type[Any] | None], ...]:
    hints = get_type_hints(entity_type)
    out: list[tuple[str, _Skip, type[Any] | None]] = []
    for f in fields(entity_type):
        if f.metadata.get("tag") is not None:
            continue
        skip, _ = _field(entity_type, f, hints[f.name], tagged=False)
        inner, _optional = _optional_inner(hints[f.name])
        item: type[Any] | None = None
        if get_origin(inner) is tuple:
            candidate, _ = _optional_inner(get_args(inner)[0])
            if is_dataclass(candidate):
                item = candidate  # type: ignore[assignment]
        out.append((f.name, skip, item))
    return tuple(out)


def entity_arrays(entity_type: type[Any], buffer: bytes | memoryview, offset: int) -> list[ArrayExtent]:
    """The non-null top-level arrays of entities of a frame that passed `check_entity_bounds`,
    so a large frame can be read item by item."""
    end = len(buffer)
    pos = offset
    found: list[ArrayExtent] = []
    flexible = bool(entity_type.__flexible__)
    for name, skip, item in _top_level_fields(entity_type):
        start = pos
        pos = skip(buffer, pos, end)
        if item is None:
            continue
        if flexible:
            encoded, items_start = _uvarint(buffer, start, end)
            count = encoded - 1
        else:
            (count,) = _I32.unpack_from(buffer, start)
            items_start = start + 4
        if count >= 0:
            found.append(ArrayExtent(name, item, count, start, items_start, pos))
    return found
