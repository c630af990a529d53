"""Serving many versions of an api with a handler written for one.

A controller's managers take the kio request of one version per api and return that version's
response. Kafka's nodes and tools send whatever their version negotiation picks, so a listener
bridges: a request of another version is copied into the handler's version, and the response
back into the version asked for. The copy is by field name, recursively through nested entities
and arrays, as Kafka's generated messages read missing fields as their defaults: a field the
target version has and the source lacks takes the target's default (its schema default, null for
a nullable field, an empty array for an array with a default), a field only the source has is
dropped. `unbridgeable_fields` says which fields a copy could not fill; a version with any is not
served unless the caller supplies its own conversion.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from types import NoneType, UnionType
from typing import TYPE_CHECKING, Any

from kraft_engine.protocol.entities import api_name, request_class, response_class

if TYPE_CHECKING:
    from kraft_engine.protocol.listener import Handler, RequestContext

__all__ = ["Downgrade", "Upgrade", "bridge", "bridged_handler", "unbridgeable_fields"]

_HINTS: dict[type[Any], dict[str, Any]] = {}


def _hints(cls: type[Any]) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _strip_optional(hint: Any) -> tuple[Any, bool]:
    if typing.get_origin(hint) in (UnionType, typing.Union):
        args = [a for a in typing.get_args(hint) if a is not NoneType]
        return args[0], True
    return hint, False


def _entity_of(hint: Any) -> tuple[type[Any] | None, bool]:
    """(nested entity class, is an array) of a field's type hint, or (None, is array)."""
    inner, _ = _strip_optional(hint)
    if typing.get_origin(inner) is tuple:
        item, _ = _strip_optional(typing.get_args(inner)[0])
        return (item if isinstance(item, type) and dataclasses.is_dataclass(item) else None), True
    if isinstance(inner, type) and dataclasses.is_dataclass(inner):
        return inner, False
    return None, False


def _has_default(f: dataclasses.Field[Any], hint: Any) -> bool:
    if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
        return True
    return _strip_optional(hint)[1]


def unbridgeable_fields(source_cls: type[Any], target_cls: type[Any], prefix: str = "") -> list[str]:
    """Fields of `target_cls` (dotted, recursively) that `bridge` from `source_cls` cannot fill:
    absent from the source and without a default."""
    missing: list[str] = []
    source_fields = {f.name: f for f in dataclasses.fields(source_cls)}
    source_hints = _hints(source_cls)
    target_hints = _hints(target_cls)
    for f in dataclasses.fields(target_cls):
        hint = target_hints[f.name]
        if f.name not in source_fields:
            if not _has_default(f, hint):
                missing.append(prefix + f.name)
            continue
        target_entity, _ = _entity_of(hint)
        source_entity, _ = _entity_of(source_hints[f.name])
        if target_entity is not None and source_entity is not None:
            missing += unbridgeable_fields(source_entity, target_entity, f"{prefix}{f.name}.")
    return missing


def bridge(value: Any, target_cls: type[Any]) -> Any:
    """A copy of the kio entity `value` as an instance of `target_cls` (another version of the
    same message); see the module docstring for the rules."""
    hints = _hints(target_cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(target_cls):
        if not hasattr(value, f.name):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                kwargs[f.name] = None  # nullable (unbridgeable_fields vetted it)
            continue
        current = getattr(value, f.name)
        entity, is_array = _entity_of(hints[f.name])
        if entity is not None and current is not None:
            current = tuple(bridge(item, entity) for item in current) if is_array else bridge(current, entity)
        kwargs[f.name] = current
    return target_cls(**kwargs)


Upgrade = Callable[[Any, type[Any]], Any]
"""`upgrade(request, served_request_cls)`: a request of another version in the served version,
for a version whose differences are not by field name (see `bridged_handler`)."""


Downgrade = Callable[[Any, type[Any]], Any]
"""`downgrade(response, asked_response_cls)`: a response of the served version in the version
asked for, where a field the older version needs has no counterpart by name (see `bridged_handler`)."""


def bridged_handler(
    api_key: int,
    *,
    served_version: int,
    versions: tuple[int, int],
    handler: Handler,
    upgrades: Mapping[int, Upgrade] | None = None,
    downgrades: Mapping[int, Downgrade] | None = None,
) -> Handler:
    """A handler for `versions` of `api_key` that runs `handler`, written for `served_version`.

    Requests of other versions are bridged up (or converted by `upgrades[version]`), responses
    bridged back down (or converted by `downgrades[version]`). Raises ValueError at once for a
    version neither the bridge nor the conversions can serve."""
    upgrades = dict(upgrades or {})
    downgrades = dict(downgrades or {})
    served_request = request_class(api_key, served_version)
    served_response = response_class(api_key, served_version)
    for version in range(versions[0], versions[1] + 1):
        if version == served_version:
            continue
        gaps = [] if version in upgrades else unbridgeable_fields(request_class(api_key, version), served_request)
        if version not in downgrades:
            gaps += unbridgeable_fields(served_response, response_class(api_key, version))
        if gaps:
            raise ValueError(f"{api_name(api_key)} v{version} cannot be served by v{served_version}: {gaps}")

    async def serve(request: Any, ctx: RequestContext) -> Any:
        version = ctx.api_version
        if version == served_version:
            return await handler(request, ctx)
        upgrade = upgrades.get(version)
        up = upgrade(request, served_request) if upgrade is not None else bridge(request, served_request)
        response = await handler(up, dataclasses.replace(ctx, api_version=served_version))
        downgrade = downgrades.get(version)
        return downgrade(response, ctx.response_class) if downgrade is not None else bridge(response, ctx.response_class)

    return serve
