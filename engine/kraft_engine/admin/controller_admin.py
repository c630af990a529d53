"""A Kafka-protocol client for the controller's admin APIs, as Kafka's Admin uses `bootstrap.controllers`.

`kraft features` and `kraft topics` (and tests, and the operator later) need what Kafka's Admin
does against a controller quorum: ApiVersions on any controller for the features it advertises,
DescribeCluster (endpoint type 2) to learn which controller is active and where it listens, and
writes sent to that controller. A standby answers NOT_CONTROLLER; an election may be in progress;
the active controller may fail over mid-request. All of that is retried until the timeout, and
any other answer is the caller's to interpret.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Self

from kio.schema.errors import ErrorCode

from kraft_engine.admin.quorum_admin import QuorumAdmin, QuorumAdminError
from kraft_engine.errors import AdminError
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["ControllerAdmin", "ControllerAdminError"]

_RETRY_INTERVAL_S = 0.1


class ControllerAdminError(AdminError):
    """No controller could be reached, or none became active, within the timeout."""


def _not_controller(response: Any) -> bool:
    """Whether a response says 'not the active controller', at the top level or for every item."""
    code = getattr(response, "error_code", None)
    if code is not None and code == ErrorCode.not_controller:
        return True
    for items in ("topics", "responses", "results"):
        entries = getattr(response, items, None)
        if entries and all(getattr(e, "error_code", None) == ErrorCode.not_controller for e in entries):
            return True
    return False


class ControllerAdmin(QuorumAdmin):
    """The quorum admin's connections and DescribeCluster, plus any request to any controller or
    to whichever of them is active."""

    def __init__(self, bootstrap: Sequence[tuple[str, int]], *, timeout_ms: int = 30000,
                 client_id: str = "kraft-admin", security: ClientSecurity | None = None) -> None:
        super().__init__(bootstrap, timeout_ms=timeout_ms, security=security)
        self._config = ConnectionConfig(
            client_id=client_id,
            request_timeout_ms=min(timeout_ms, 10000),
            socket_connection_setup_timeout_ms=min(timeout_ms, 2000),
            security=security,  # a tool's --command-config (security.protocol, ssl.*, sasl.*)
        )
        self._active: tuple[str, int] | None = None

    async def __aenter__(self) -> Self:
        return self

    @property
    def bootstrap(self) -> list[tuple[str, int]]:
        return list(self._bootstrap)

    def _deadline(self) -> float:
        return asyncio.get_running_loop().time() + self.timeout_ms / 1000

    async def _pause_or_give_up(self, deadline: float, what: str) -> None:
        if asyncio.get_running_loop().time() >= deadline:
            raise ControllerAdminError(f"{what}: no active controller answered within {self.timeout_ms} ms")
        await asyncio.sleep(_RETRY_INTERVAL_S)

    # -- any controller ----------------------------------------------------------------------------
    async def any_connection(self) -> KafkaConnection:
        """A connected (ApiVersions-negotiated) connection to some bootstrap controller."""
        for connection in self._connections.values():
            if connection.connected:
                return connection
        deadline = self._deadline()
        while True:
            for address in self._bootstrap:
                connection = self._connection(address)
                try:
                    await connection.connect(timeout_ms=self._config.socket_connection_setup_timeout_ms)
                    return connection
                except (KafkaProtocolError, OSError):
                    continue
            await self._pause_or_give_up(deadline, "connect")

    async def send_to_any(self, request: Any) -> Any:
        deadline = self._deadline()
        while True:
            for address in self._bootstrap:
                response = await self._send(address, request)
                if response is not None:
                    return response
            await self._pause_or_give_up(deadline, type(request).__name__)

    # -- the active controller ---------------------------------------------------------------------
    async def active_controller(self) -> tuple[str, int] | None:
        """The active controller's address per DescribeCluster on a reachable bootstrap controller."""
        try:
            return await self._leader_address()
        except QuorumAdminError:
            return None

    async def send_to_active(self, request: Any) -> Any:
        """Send `request` to the active controller; retried while no controller takes it.

        The last controller that took a request is asked first, as a broker's controller channel
        does; DescribeCluster runs again only when it refuses or cannot be reached."""
        deadline = self._deadline()
        name = type(request).__name__
        while True:
            address = self._active or await self.active_controller()
            if address is not None:
                response = await self._send(address, request)
                if response is not None and not _not_controller(response):
                    self._active = address
                    return response
            self._active = None
            await self._pause_or_give_up(deadline, name)
