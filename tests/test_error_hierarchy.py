"""Every error the engine defines sits under one root, `kraft_engine.errors.KraftError`."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import kraft_engine
from kraft_engine.errors import KraftError, SnapshotError, StorageError
from kraft_engine.errors import RaftError as RaftLayerError

# Not refusals: a broken invariant is a bug, and the listener's private exception is control flow.
_OUTSIDE = {"kraft_engine.invariant.InvariantViolation", "kraft_engine.protocol.listener._Close"}


def _engine_exceptions() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for module_info in pkgutil.walk_packages(kraft_engine.__path__, prefix="kraft_engine."):
        module = importlib.import_module(module_info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == module.__name__:
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


def test_every_engine_error_derives_from_the_one_root() -> None:
    exceptions = _engine_exceptions()
    assert len(exceptions) > 30  # the walk saw the whole engine
    strays = sorted(name for name, cls in exceptions.items() if name not in _OUTSIDE and not issubclass(cls, KraftError))
    assert strays == []


def test_each_concept_has_one_class() -> None:
    by_name: dict[str, list[str]] = {}
    for name in _engine_exceptions():
        by_name.setdefault(name.rsplit(".", 1)[1], []).append(name)
    assert {short: names for short, names in by_name.items() if len(names) > 1} == {}
    assert issubclass(SnapshotError, StorageError) and issubclass(SnapshotError, RaftLayerError)
