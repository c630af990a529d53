"""Outbound requests of one replica: tokens, one request in flight per peer, timeouts, backoff.

Kafka's RequestManager. A follower must never have two Fetches outstanding to its leader (the
second answer could append an offset twice), so every destination has at most one request in
flight; a failed one backs the destination off for `controller.quorum.retry.backoff.ms`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from kraft_engine.raft.config import RaftConfig
from kraft_engine.raft.messages import SentRequest
from kraft_engine.raft.output import OutboundRequest, Outbox
from kraft_engine.raft.voter_set import Endpoint

__all__ = ["NEVER", "Connection", "Inflight", "RequestManager"]

# A deadline that never comes (the response, or some other event, wakes the node first).
NEVER: Final = 2**62


@dataclass(slots=True)
class Inflight:
    token: int
    destination_id: int
    api_key: int
    request: SentRequest
    deadline_ms: int


@dataclass(slots=True)
class Connection:
    inflight_token: int | None = None
    backoff_until_ms: int = 0


class RequestManager:
    """Who has a request in flight, and until when each destination backs off."""

    def __init__(self, *, config: RaftConfig, outbox: Outbox) -> None:
        self._config = config
        self._outbox = outbox
        self._next_token = 1
        self._inflight: dict[int, Inflight] = {}
        self._connections: dict[int, Connection] = {}

    def connection(self, destination_id: int) -> Connection:
        connection = self._connections.get(destination_id)
        if connection is None:
            connection = self._connections[destination_id] = Connection()
        return connection

    def is_ready(self, destination_id: int, now_ms: int) -> bool:
        connection = self.connection(destination_id)
        return connection.inflight_token is None and now_ms >= connection.backoff_until_ms

    def is_busy(self, destination_id: int) -> bool:
        return self.connection(destination_id).inflight_token is not None

    def ready_at(self, now_ms: int, destination_id: int) -> int:
        """When a request to `destination_id` could go out (NEVER while one is in flight)."""
        connection = self._connections.get(destination_id)
        if connection is None:
            return now_ms
        if connection.inflight_token is not None:
            return NEVER  # the response (or its timeout) wakes us
        return max(now_ms, connection.backoff_until_ms)

    def send(self, destination_id: int, endpoints: tuple[Endpoint, ...], request: SentRequest, now_ms: int) -> int | None:
        """Send if the connection is idle and not backing off; the token, or None if not sent."""
        if not self.is_ready(destination_id, now_ms):
            return None
        token = self._next_token
        self._next_token += 1
        deadline = now_ms + self._config.request_timeout_ms
        self._inflight[token] = Inflight(
            token=token,
            destination_id=destination_id,
            api_key=int(request.__api_key__),
            request=request,
            deadline_ms=deadline,
        )
        self.connection(destination_id).inflight_token = token
        self._outbox.send(
            OutboundRequest(
                token=token,
                destination_id=destination_id,
                endpoints=endpoints,
                request=request,
                timeout_ms=self._config.request_timeout_ms,
            )
        )
        return token

    def send_unconditionally(
        self, destination_id: int, endpoints: tuple[Endpoint, ...], request: SentRequest, now_ms: int
    ) -> int | None:
        """Send now, abandoning whatever was in flight to that destination and its backoff."""
        connection = self.connection(destination_id)
        connection.backoff_until_ms = 0
        if connection.inflight_token is not None:
            self._inflight.pop(connection.inflight_token, None)
            connection.inflight_token = None
        return self.send(destination_id, endpoints, request, now_ms)

    def take(self, token: int) -> Inflight | None:
        """The request a response answers, no longer in flight (None: timed out, or a duplicate)."""
        inflight = self._inflight.pop(token, None)
        if inflight is not None:
            connection = self.connection(inflight.destination_id)
            if connection.inflight_token == token:
                connection.inflight_token = None
        return inflight

    def reset(self) -> None:
        """Forget in-flight requests (their responses will be ignored) on a role change."""
        self._inflight.clear()
        self._connections.clear()

    def expire(self, now_ms: int, on_timeout: Callable[[Inflight], object]) -> None:
        """Time out every request past its deadline; the destination backs off after it."""
        for token, inflight in list(self._inflight.items()):
            if now_ms >= inflight.deadline_ms:
                del self._inflight[token]
                connection = self.connection(inflight.destination_id)
                if connection.inflight_token == token:
                    connection.inflight_token = None
                on_timeout(inflight)
                connection.backoff_until_ms = inflight.deadline_ms + self._config.retry_backoff_ms

    def deadlines(self) -> Iterator[int]:
        return (inflight.deadline_ms for inflight in self._inflight.values())
