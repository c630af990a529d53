"""Fixtures for wire-layer tests: listeners and raw peers that are always closed."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from protocol_helpers import METADATA, RawPeer, echo_metadata

from kraft_engine.protocol import Listener


@pytest.fixture
async def make_listener() -> AsyncIterator[Callable[..., Awaitable[Listener]]]:
    """`await make_listener(**kwargs)`: a started listener serving Metadata v0..12 (unless
    `metadata=False`) and any `routes` ({api key: (min, max, handler)}), closed after the test."""
    listeners: list[Listener] = []

    async def make(*, metadata: bool = True, handler: Any = echo_metadata,
                   routes: dict[int, tuple[int, int, Any]] | None = None, **kwargs: Any) -> Listener:
        listener = Listener(**kwargs)
        listeners.append(listener)
        if metadata:
            listener.register(METADATA, min_version=0, max_version=12, handler=handler)
        for api_key, (low, high, route_handler) in (routes or {}).items():
            listener.register(api_key, min_version=low, max_version=high, handler=route_handler)
        await listener.start("127.0.0.1", 0)
        return listener

    yield make
    for listener in listeners:
        await listener.close()


@pytest.fixture
async def raw_peer() -> AsyncIterator[Callable[[Listener], Awaitable[RawPeer]]]:
    peers: list[RawPeer] = []

    async def connect(listener: Listener) -> RawPeer:
        peer = await RawPeer.connect(*listener.address)
        peers.append(peer)
        return peer

    yield connect
    for peer in peers:
        await peer.close()


