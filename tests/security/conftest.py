"""Fixtures for the security tests: the wire-layer fixtures of tests/protocol (listeners and raw
peers that are always closed), and that directory's and tests/process's helpers on the path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_TESTS = Path(__file__).resolve().parent.parent
for _helpers in ("protocol", "process", "interop"):  # protocol_helpers; quorum/broker_processes; kafka_jars
    sys.path.insert(0, str(_TESTS / _helpers))

_spec = importlib.util.spec_from_file_location("protocol_conftest", _TESTS / "protocol" / "conftest.py")
if _spec is None or _spec.loader is None:
    raise ImportError("tests/protocol/conftest.py not found")
_protocol_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_protocol_conftest)

# `await make_listener(security=..., handler=...)`, `await raw_peer(listener)`
make_listener = _protocol_conftest.make_listener
raw_peer = _protocol_conftest.raw_peer
