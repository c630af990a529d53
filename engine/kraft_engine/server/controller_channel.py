"""Requests from a broker to the active controller (Kafka's NodeToControllerChannelManager).

Registration, heartbeats, AlterPartition and forwarded admin requests all go to whichever
controller the broker's metadata raft replica currently knows as the quorum leader, on the first
`controller.listener.names` endpoint that voter advertises. `send` finds it, connects (one
connection per address, kept), and returns the response; it raises `ControllerUnavailable` when no
controller is known or the exchange failed, so the caller decides whether and when to retry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kraft_engine.errors import ServerError
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["ControllerChannel", "ControllerUnavailable"]

logger = logging.getLogger(__name__)


class ControllerUnavailable(ServerError):
    """No active controller known, or the exchange with it failed (retriable)."""


class ControllerChannel:
    def __init__(
        self,
        *,
        active_controller: Callable[[], tuple[str, int] | None],
        client_id: str,
        request_timeout_ms: int,
        security: ClientSecurity | None = None,
    ) -> None:
        self._active_controller = active_controller
        self._config = ConnectionConfig(
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            socket_connection_setup_timeout_ms=min(request_timeout_ms, 5000),
            reconnect_backoff_ms=50,
            reconnect_backoff_max_ms=1000,
            security=security,
        )
        self._connections: dict[tuple[str, int], KafkaConnection] = {}

    async def send(self, request: Any, *, timeout_ms: int) -> Any:
        address = self._active_controller()
        if address is None:
            raise ControllerUnavailable("no active controller is known yet")
        connection = self._connections.get(address)
        if connection is None:
            connection = KafkaConnection(address[0], address[1], config=self._config)
            self._connections[address] = connection
        try:
            return await connection.send(request, timeout_ms=timeout_ms)
        except (KafkaProtocolError, OSError) as error:
            raise ControllerUnavailable(f"controller at {address[0]}:{address[1]}: {error}") from error

    async def close(self) -> None:
        for connection in self._connections.values():
            await connection.close()
        self._connections.clear()
