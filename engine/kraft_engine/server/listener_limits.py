"""The connection limits a node's listeners take from its config, in one place for every listener.

Controllers and brokers build their listeners from the same keys (`socket.request.max.bytes`,
`connections.max.idle.ms`, `max.connections`, `max.connections.per.ip` and its overrides), so a
limit added here holds on every listener of every node. Host names in
`max.connections.per.ip.overrides` are resolved once, when the node starts, as Kafka's
ConnectionQuotas resolves them (`InetAddress.getByName`); a name that does not resolve stops the
start, as it stops Kafka's. Deviation: a name stands for every address it resolves to, where
Kafka keeps the first one.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from typing import TypedDict

from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.startup_checks import StartupError

__all__ = ["ListenerLimits", "listener_limits", "resolve_connection_overrides"]


class ListenerLimits(TypedDict):
    request_max_bytes: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: dict[str, int]


def resolve_connection_overrides(overrides: Mapping[str, int]) -> dict[str, int]:
    """Per-IP limits from `max.connections.per.ip.overrides` (host names or IPs -> count)."""
    resolved: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except OSError as e:
            raise StartupError(f"max.connections.per.ip.overrides: cannot resolve {host}: {e}") from None
        for info in infos:
            resolved[str(info[4][0])] = count
    return resolved


def listener_limits(config: KafkaConfig) -> ListenerLimits:
    """Keyword arguments for `protocol.Listener` from a node's config."""
    return ListenerLimits(
        request_max_bytes=config.socket_request_max_bytes,
        # Negative is Kafka's "never close idle connections" and passes through; 0 (close at
        # once) is the one value the Listener refuses, and 1 ms is the nearest it accepts.
        connections_max_idle_ms=config.connections_max_idle_ms or 1,
        max_connections=config.max_connections,
        max_connections_per_ip=config.max_connections_per_ip,
        max_connections_per_ip_overrides=resolve_connection_overrides(config.max_connections_per_ip_overrides),
    )
