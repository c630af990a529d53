"""Hypothesis strategies for valid kio entities of any api and version, built from kio's schema.

Both the bounds-check property tests and the live-node fuzz suite start from valid frames
generated here, then mutate them.
"""

from __future__ import annotations

import functools
import typing
from dataclasses import MISSING, fields, is_dataclass
from datetime import timedelta
from types import NoneType, UnionType
from typing import Any

from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.serial.readers import tz_aware_from_i64
from kio.static.primitive import i32Timedelta, i64, i64Timedelta

from kraft_engine.protocol.framing import encode_request

_INTS = {
    "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1), "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1), "uint8": (0, 2**8 - 1), "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1), "uint64": (0, 2**64 - 1),
}
_TEXT = st.text(alphabet="abcxyz-._019", max_size=8)


def _primitive(kafka_type: str) -> st.SearchStrategy[Any]:
    if kafka_type in _INTS:
        low, high = _INTS[kafka_type]
        return st.integers(low, high)
    if kafka_type == "string":
        return _TEXT
    if kafka_type in ("bytes", "records"):
        return st.binary(max_size=8)
    if kafka_type == "bool":
        return st.booleans()
    if kafka_type == "uuid":
        return st.uuids()
    if kafka_type == "error_code":
        return st.sampled_from(list(ErrorCode))
    if kafka_type == "float64":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kafka_type == "timedelta_i32":
        return st.integers(0, 2**31 - 1).map(lambda ms: i32Timedelta.parse(timedelta(milliseconds=ms)))
    if kafka_type == "timedelta_i64":
        return st.integers(0, 2**40).map(lambda ms: i64Timedelta.parse(timedelta(milliseconds=ms)))
    if kafka_type == "datetime_i64":
        return st.integers(0, 2**41).map(lambda ms: tz_aware_from_i64(i64(ms)))
    raise NotImplementedError(kafka_type)


def _unwrap(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        return args[0], True
    return hint, False


@functools.cache
def entities(cls: type[Any]) -> st.SearchStrategy[Any]:
    """Valid instances of a kio entity class (small arrays and strings)."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, st.SearchStrategy[Any]] = {}
    for f in fields(cls):
        inner, optional = _unwrap(hints[f.name])
        tagged = f.metadata.get("tag") is not None
        if typing.get_origin(inner) is tuple:
            item, _ = _unwrap(typing.get_args(inner)[0])
            items = (st.deferred(lambda item=item: entities(item)) if is_dataclass(item)
                     else _primitive(f.metadata["kafka_type"]))
            strategy: st.SearchStrategy[Any] = st.lists(items, max_size=3).map(tuple)
        elif is_dataclass(inner):
            strategy = st.deferred(lambda inner=inner: entities(inner))
        else:
            strategy = _primitive(f.metadata["kafka_type"])
        if optional and not tagged:
            strategy = st.none() | strategy
        if tagged and f.default is not MISSING:
            strategy = st.just(f.default) | strategy
        kwargs[f.name] = strategy
    return st.builds(cls, **kwargs)


def request_frames(cls: type[Any]) -> st.SearchStrategy[bytes]:
    """Complete request frames (size prefix included) of a kio request class."""
    return st.tuples(entities(cls), st.integers(0, 2**31 - 1), st.none() | _TEXT).map(
        lambda t: encode_request(t[0], correlation_id=t[1], client_id=t[2])
    )
