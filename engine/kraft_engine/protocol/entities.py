"""Cached lookups of kio's protocol entities by (api key, version).

Every request on the hot path needs its request class, response class, header classes and their
kio readers and writers. kio resolves those by importing modules by dotted name, which is far too
slow to repeat per request, so each answer is computed once per process and kept here.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from io import BytesIO
from typing import Any, TypeVar

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_writer

from kraft_engine.records.tagged_fields import tolerant_reader

__all__ = [
    "API_VERSIONS_KEY",
    "api_name",
    "error_codes_of",
    "kio_version_range",
    "make_entity",
    "reader_for",
    "request_class",
    "response_class",
    "writer_for",
]

API_VERSIONS_KEY = 18

_T = TypeVar("_T")
Reader = Callable[[Any, int], tuple[Any, int]]
Writer = Callable[[BytesIO, Any], None]


@functools.cache
def kio_version_range(api_key: int) -> tuple[int, int] | None:
    """The (min, max) versions of `api_key` that kio can encode, or None for an unknown api."""
    name = api_key_map.get(api_key)
    if name is None:
        return None
    versions = schema_name_map[name]
    return min(versions), max(versions)


@functools.cache
def api_name(api_key: int) -> str:
    """Kafka's CamelCase name of an api ("ApiVersions"), or "Unknown(<key>)"."""
    name = api_key_map.get(api_key)
    if name is None:
        return f"Unknown({api_key})"
    return "".join(part.capitalize() for part in name.split("_"))


def make_entity(cls: type[Any], **values: Any) -> Any:
    """An entity of `cls` from the `values` this version has fields for (later versions add
    fields; a handler builds one answer for all the versions it serves)."""
    names = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@functools.cache
def request_class(api_key: int, version: int) -> type[Any]:
    """kio's request entity class for `api_key` at `version` (KeyError if kio has none)."""
    try:
        return load_request_schema(api_key, version)
    except Exception as e:
        raise KeyError(f"no request schema for api key {api_key} version {version}") from e


@functools.cache
def response_class(api_key: int, version: int) -> type[Any]:
    """kio's response entity class for `api_key` at `version` (KeyError if kio has none)."""
    try:
        return load_response_schema(api_key, version)
    except Exception as e:
        raise KeyError(f"no response schema for api key {api_key} version {version}") from e


class _PerClass(dict[type[Any], _T]):
    """A cache keyed by entity class that computes missing entries with `make(cls)`.

    A dict subclass rather than functools.cache: a hit is one dict lookup on the hot path, and
    mypy cannot see through lru_cache's signature that classes are hashable."""

    def __init__(self, make: Callable[[type[Any]], _T]) -> None:
        super().__init__()
        self._make = make

    def __missing__(self, cls: type[Any]) -> _T:
        value = self[cls] = self._make(cls)
        return value


_READERS: _PerClass[Reader] = _PerClass(tolerant_reader)
_WRITERS: _PerClass[Writer] = _PerClass(entity_writer)


def reader_for(cls: type[Any]) -> Reader:
    """kio's reader for an entity class: `reader(buffer, offset) -> (entity, size)`; tagged fields
    the class does not name are skipped, as Kafka's readers skip them (`records.tagged_fields`)."""
    return _READERS[cls]


def writer_for(cls: type[Any]) -> Writer:
    """kio's writer for an entity class: `writer(buffer, entity)`."""
    return _WRITERS[cls]


# --- error codes -------------------------------------------------------------------------------
# Kafka counts every error code a response carries (top level and per partition). Walking a kio
# entity generically per response would be costly on Fetch, so for each class we compile, once,
# the list of fields that can lead to an error code and skip everything else.

_CODE = 0
_ONE = 1
_MANY = 2


_ErrorPaths = tuple[tuple[str, int, type[Any] | None], ...]


def _error_paths(cls: type[Any]) -> _ErrorPaths:
    return _ERROR_PATHS[cls]


def _compile_error_paths(cls: type[Any]) -> _ErrorPaths:
    hints = typing.get_type_hints(cls)
    paths: list[tuple[str, int, type[Any] | None]] = []
    for f in fields(cls):
        hint = hints[f.name]
        if hint is ErrorCode:
            paths.append((f.name, _CODE, None))
            continue
        args = typing.get_args(hint)
        if typing.get_origin(hint) is tuple and args and is_dataclass(args[0]):
            nested: type[Any] = args[0]  # type: ignore[assignment]
            if _error_paths(nested):
                paths.append((f.name, _MANY, nested))
        elif isinstance(hint, type) and is_dataclass(hint):
            if _error_paths(hint):
                paths.append((f.name, _ONE, hint))
        elif typing.get_origin(hint) in (typing.Union, types.UnionType):
            inner = [a for a in args if isinstance(a, type) and is_dataclass(a)]
            if inner and _error_paths(inner[0]):
                paths.append((f.name, _ONE, inner[0]))
    return tuple(paths)


def _collect(entity: Any, counts: dict[ErrorCode, int]) -> None:
    for name, kind, nested in _error_paths(type(entity)):
        value = getattr(entity, name)
        if kind == _CODE:
            counts[value] = counts.get(value, 0) + 1
        elif kind == _ONE:
            if value is not None and nested is not None:
                _collect(value, counts)
        else:
            for item in value:
                _collect(item, counts)


_ERROR_PATHS: _PerClass[_ErrorPaths] = _PerClass(_compile_error_paths)


def error_codes_of(response: Any) -> dict[ErrorCode, int]:
    """How many times each error code (NONE included) appears in a response, like Kafka's
    `AbstractResponse.errorCounts()`."""
    counts: dict[ErrorCode, int] = {}
    _collect(response, counts)
    return counts
