"""The node's HTTP endpoint (`kraftwerk.metrics.port`): Prometheus metrics, health, readiness,
local status and, only when enabled for tests, the stand-in state machine's API.

It runs on the node's event loop (not prometheus-client's thread server) because the status and
test routes read and drive the raft node, which must only ever be touched from that loop. It is
a deliberately small HTTP/1.1 server: keep-alive, Content-Length bodies, no chunking.

Routes:

    GET  /metrics                     Prometheus text format (raft + wire-layer metrics)
    GET  /healthz                     200 while the process is serving
    GET  /readyz                      200 when a leader is known and this node is caught up
                                      (leader itself, or a follower whose last successful Fetch
                                      is within controller.quorum.fetch.timeout.ms and whose
                                      log end reached the high watermark); 503 otherwise
    GET  /kraftwerk/status            this node's raft view as JSON (role, epoch, leader, ...); a
                                      broker's also lists its log directories with their ids

Only with `kraftwerk.test.state.machine.enable=true` (the append-only test store):

    POST /kraftwerk/test/append       body {"values": ["...", ...]}: one batch, answered after
                                      commit with {"offset": last offset, "epoch": e}; 421 with
                                      {"error": "NOT_LEADER", "leader_id": ..} on a non-leader
    GET  /kraftwerk/test/entries?from=N&limit=M   committed entries at or above offset N

We chose HTTP on the metrics port over inventing a Kafka api key: the test store is not Kafka
metadata, and a made-up wire api would lie in ApiVersions. The Kafka listener serves only real
Kafka apis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kraft_engine.protocol import close_server

__all__ = ["HttpEndpoint", "HttpResponse", "Route"]

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES = 16 * 1024 * 1024
_MAX_HEADER_LINES = 100
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 413: "Payload Too Large",
            421: "Misdirected Request", 500: "Internal Server Error", 503: "Service Unavailable",
            504: "Gateway Timeout"}


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes
    content_type: str = "application/json"

    @staticmethod
    def json(status: int, value: Any) -> HttpResponse:
        return HttpResponse(status, json.dumps(value).encode() + b"\n")


Route = Callable[[dict[str, list[str]], bytes], Awaitable[HttpResponse]]


class HttpEndpoint:
    """Serves GET/POST routes; `/metrics` is built in from the registry."""

    def __init__(self, *, registry: CollectorRegistry) -> None:
        self._registry = registry
        self._routes: dict[tuple[str, str], Route] = {("GET", "/metrics"): self._metrics}
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def route(self, method: str, path: str, handler: Route) -> None:
        self._routes[(method, path)] = handler

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the HTTP endpoint is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            await close_server(server, self._connections)

    async def _metrics(self, query: dict[str, list[str]], body: bytes) -> HttpResponse:
        return HttpResponse(200, generate_latest(self._registry), CONTENT_TYPE_LATEST)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections.add(task)
        try:
            while await self._serve_one(reader, writer):
                pass
        except (asyncio.CancelledError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if task is not None:
                self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve_one(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        request_line = await reader.readline()
        if not request_line:
            return False
        parts = request_line.decode("latin-1").split()
        headers: dict[str, str] = {}
        for _ in range(_MAX_HEADER_LINES):
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if len(parts) != 3:
            await self._write(writer, HttpResponse.json(400, {"error": "malformed request line"}), keep_alive=False)
            return False
        method, target, version = parts
        keep_alive = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY_BYTES:
            await self._write(writer, HttpResponse.json(413, {"error": "bad or too large Content-Length"}), keep_alive=False)
            return False
        body = await reader.readexactly(length) if length else b""
        url = urlsplit(target)
        handler = self._routes.get((method, url.path))
        if handler is None:
            known = any(path == url.path for _, path in self._routes)
            response = HttpResponse.json(405 if known else 404, {"error": f"no route {method} {url.path}"})
        else:
            try:
                response = await handler(parse_qs(url.query), body)
            except Exception as e:  # a bug in a route must not take the endpoint down
                logger.exception("HTTP route %s %s failed", method, url.path)
                response = HttpResponse.json(500, {"error": repr(e)})
        await self._write(writer, response, keep_alive=keep_alive)
        return keep_alive

    @staticmethod
    async def _write(writer: asyncio.StreamWriter, response: HttpResponse, *, keep_alive: bool) -> None:
        head = (
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + response.body)
        await writer.drain()
