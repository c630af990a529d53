"""A client over a cluster's bootstrap addresses, the entry point for tools and the operator.

Kafka clients are given `bootstrap.servers` and only need one of them to answer. `KafkaClient`
keeps one `KafkaConnection` per address, sends to a connected one when there is one, and otherwise
tries the addresses in turn (starting at a random one, so that many clients spread out), each
attempt respecting that address's reconnect backoff, until the request timeout runs out.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from kraft_engine.protocol.connection import ConnectionConfig, KafkaConnection
from kraft_engine.protocol.errors import ConnectionFailed

__all__ = ["KafkaClient", "parse_bootstrap_servers"]


def parse_bootstrap_servers(servers: str | Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Kafka's `host:port,host:port` list (IPv6 as `[::1]:9092`) or a list of (host, port)."""
    if not isinstance(servers, str):
        return [(str(host), int(port)) for host, port in servers]
    addresses: list[tuple[str, int]] = []
    for raw in servers.split(","):
        entry = raw.strip()
        if not entry:
            continue
        host, sep, port = entry.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"bootstrap server {entry!r} is not host:port")
        addresses.append((host.strip("[]"), int(port)))
    if not addresses:
        raise ValueError("no bootstrap servers given")
    return addresses


class KafkaClient:
    """Connections to a set of bootstrap addresses, with failover between them."""

    def __init__(
        self,
        bootstrap_servers: str | Sequence[tuple[str, int]],
        *,
        config: ConnectionConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config or ConnectionConfig()
        self._rng = rng or random.Random()
        self.bootstrap = parse_bootstrap_servers(bootstrap_servers)
        self._connections: dict[tuple[str, int], KafkaConnection] = {}
        self._start = self._rng.randrange(len(self.bootstrap))

    def connection(self, host: str, port: int) -> KafkaConnection:
        """The (cached) connection to one address; it connects on first use."""
        key = (host, port)
        conn = self._connections.get(key)
        if conn is None:
            conn = KafkaConnection(host, port, config=self.config, rng=self._rng)
            self._connections[key] = conn
        return conn

    async def bootstrap_connection(self, *, timeout_ms: int | None = None) -> KafkaConnection:
        """A connected connection to one of the bootstrap addresses."""
        loop = asyncio.get_running_loop()
        budget_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + budget_ms / 1000
        n = len(self.bootstrap)
        ordered = [self.connection(*self.bootstrap[(self._start + i) % n]) for i in range(n)]
        for conn in ordered:
            if conn.connected:
                return conn
        while True:
            # The address whose backoff ends first; ties keep the (randomised) bootstrap order.
            conn = min(ordered, key=lambda c: c.ready_in_ms())
            if await conn.try_connect(deadline=deadline):
                return conn
            if loop.time() >= deadline:
                errors = ", ".join(f"{c.host}:{c.port}: {c.last_connect_error!r}" for c in ordered)
                raise ConnectionFailed(f"no bootstrap server reachable within {budget_ms} ms ({errors})")

    async def send(self, request: Any, *, timeout_ms: int | None = None) -> Any:
        """Send a kio request to any bootstrap node and return its response."""
        loop = asyncio.get_running_loop()
        budget_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        started = loop.time()
        conn = await self.bootstrap_connection(timeout_ms=budget_ms)
        left_ms = max(0, budget_ms - int((loop.time() - started) * 1000))
        return await conn.send(request, timeout_ms=left_ms)

    async def close(self) -> None:
        connections, self._connections = list(self._connections.values()), {}
        for conn in connections:
            await conn.close()

    async def __aenter__(self) -> KafkaClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
