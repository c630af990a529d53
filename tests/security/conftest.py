"""Fixtures for the security tests: listeners with TLS and SASL, closed after each test."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

for _helpers in ("protocol", "process"):  # protocol_helpers; quorum_processes and broker_processes
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / _helpers))

from protocol_helpers import METADATA, echo_metadata  # noqa: E402

from kraft_engine.protocol import Listener  # noqa: E402


@pytest.fixture
async def secure_listener() -> AsyncIterator[Callable[..., Awaitable[Listener]]]:
    """`await secure_listener(security=..., handler=...)`: a started listener serving Metadata."""
    listeners: list[Listener] = []

    async def make(*, handler: Any = echo_metadata, **kwargs: Any) -> Listener:
        listener = Listener(**kwargs)
        listeners.append(listener)
        listener.register(METADATA, min_version=0, max_version=12, handler=handler)
        await listener.start("127.0.0.1", 0)
        return listener

    yield make
    for listener in listeners:
        await listener.close()


@pytest.fixture
async def raw_peer() -> AsyncIterator[Callable[[Listener], Awaitable[Any]]]:
    """`await raw_peer(listener)`: a RawPeer (exact bytes) closed after the test."""
    from protocol_helpers import RawPeer

    peers: list[RawPeer] = []

    async def connect(listener: Listener) -> RawPeer:
        peer = await RawPeer.connect(*listener.address)
        peers.append(peer)
        return peer

    yield connect
    for peer in peers:
        await peer.close()
