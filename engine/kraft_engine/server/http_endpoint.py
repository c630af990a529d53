"""The node's HTTP endpoint (`kraftwerk.metrics.port`): Prometheus metrics, health, readiness,
local status and, only when enabled for tests, the stand-in state machine's API.

It runs on the node's event loop (not prometheus-client's thread server) because the status and
test routes read and drive the raft node, which must only ever be touched from that loop. It is
a deliberately small HTTP/1.1 server: keep-alive, pipelining (answers in request order),
Content-Length bodies, no chunking.

It is an `asyncio.Protocol`, not a stream server: a request that arrives whole is parsed once, in
the `data_received` call that completes it, and its answer goes straight to the transport. The
stream version read every header line through its own `StreamReader.readline` await and woke a
per-connection task per request; behind `bench/quorum.py`'s 64 writers (one test-store append
per request, on the same loop as raft's leader) it was about 40 % of the leader's CPU per record.

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
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

__all__ = ["HttpEndpoint", "HttpResponse", "Route"]

logger = logging.getLogger(__name__)

_MAX_BODY_BYTES: Final = 16 * 1024 * 1024
_MAX_HEADER_LINES: Final = 100
# The request line and headers together (a StreamReader's line limit was 64 KiB per line).
_MAX_HEAD_BYTES: Final = 64 * 1024
# While a request is being answered, at most this much of the next ones is buffered; then the
# connection stops reading until the answer is out (pipelining without an unbounded buffer).
_MAX_PIPELINED_BYTES: Final = 64 * 1024
_REASONS: Final = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                   413: "Payload Too Large", 421: "Misdirected Request", 500: "Internal Server Error",
                   503: "Service Unavailable", 504: "Gateway Timeout"}


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
        self._paths: set[str] = {"/metrics"}
        self._server: asyncio.Server | None = None
        self._connections: set[_HttpConnection] = set()

    def route(self, method: str, path: str, handler: Route) -> None:
        self._routes[(method, path)] = handler
        self._paths.add(path)

    async def start(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _HttpConnection(self), host, port)

    @property
    def port(self) -> int:
        if self._server is None or not self._server.sockets:
            raise RuntimeError("the HTTP endpoint is not started")
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        """Stop accepting, drop every connection (a request being answered is cancelled)."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        answering = [task for connection in list(self._connections) if (task := connection.abort()) is not None]
        if answering:
            await asyncio.gather(*answering, return_exceptions=True)
        await server.wait_closed()

    async def _metrics(self, query: dict[str, list[str]], body: bytes) -> HttpResponse:
        return HttpResponse(200, generate_latest(self._registry), CONTENT_TYPE_LATEST)

    def _handler(self, method: str, path: str) -> Route | HttpResponse:
        handler = self._routes.get((method, path))
        if handler is not None:
            return handler
        return HttpResponse.json(405 if path in self._paths else 404, {"error": f"no route {method} {path}"})


class _HttpConnection(asyncio.Protocol):
    """One client connection: requests parsed from the buffer in order, one answered at a time."""

    def __init__(self, endpoint: HttpEndpoint) -> None:
        self._endpoint = endpoint
        self._transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        # The route's answer to the current request (None between requests), and its path.
        self._answering: asyncio.Future[HttpResponse] | None = None
        self._path = ""
        self._keep_alive = True
        self._write_paused = False
        self._eof = False
        self._closing = False

    # -- asyncio.Protocol ------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not isinstance(transport, asyncio.Transport):
            raise TypeError(f"expected a stream transport, got {type(transport).__name__}")
        self._transport = transport
        self._endpoint._connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        self._endpoint._connections.discard(self)
        answering, self._answering = self._answering, None
        if answering is not None:
            answering.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._serve()
        if (
            len(self._buffer) > _MAX_PIPELINED_BYTES
            and (self._answering is not None or self._write_paused)
            and self._transport is not None
        ):
            self._transport.pause_reading()  # resumed once the answers are out (`_serve`)

    def eof_received(self) -> bool:
        # The client is done sending; whatever it sent is still answered, then we close.
        self._eof = True
        self._serve()
        return True

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._serve()

    def abort(self) -> asyncio.Future[HttpResponse] | None:
        """Drop the connection now; the request being answered (if any) is cancelled and returned."""
        self._closing = True
        answering, self._answering = self._answering, None
        if answering is not None:
            answering.cancel()
        if self._transport is not None:
            self._transport.abort()
        return answering

    # -- requests ----------------------------------------------------------------------------------
    def _serve(self) -> None:
        """Answer the buffered requests in order, until one is waiting on its route or the buffer
        holds no whole request."""
        transport = self._transport
        while transport is not None and self._answering is None and not self._closing and not self._write_paused:
            request = self._next_request()
            if request is None:
                if self._eof:
                    self._close()
                elif not transport.is_reading():
                    transport.resume_reading()
                return
            if isinstance(request, HttpResponse):  # malformed: answered, then closed
                self._keep_alive = False
                self._write(request)
                return
            handler, query, body, path = request
            if isinstance(handler, HttpResponse):
                self._write(handler)
                continue
            try:
                # A route that returns a future (not a coroutine) is answered from that future's
                # callback, without a task for the request: the test store's append does.
                answer = asyncio.ensure_future(handler(query, body))
            except Exception as e:
                self._write(_route_failed(path, e))
                continue
            self._answering = answer
            self._path = path
            answer.add_done_callback(self._answered)
            return

    def _answered(self, answer: asyncio.Future[HttpResponse]) -> None:
        if answer is not self._answering:
            return  # the connection was lost meanwhile
        self._answering = None
        if answer.cancelled():  # not by us: the route gave up without an answer
            self._close()
            return
        error = answer.exception()
        self._write(answer.result() if error is None else _route_failed(self._path, error))
        self._serve()

    def _next_request(self) -> tuple[Route | HttpResponse, dict[str, list[str]], bytes, str] | HttpResponse | None:
        """The next whole request in the buffer, taken out of it; an error answer for a malformed
        one; None while it is incomplete."""
        buffer = self._buffer
        end = buffer.find(b"\r\n\r\n")
        separator = 4
        bare = buffer.find(b"\n\n")
        if bare >= 0 and (end < 0 or bare < end):
            end, separator = bare, 2
        if end < 0:
            if len(buffer) > _MAX_HEAD_BYTES:
                return HttpResponse.json(400, {"error": "request head too large"})
            return None
        lines = bytes(buffer[:end]).splitlines()
        # Blank lines before a request line are skipped (RFC 9112 2.2).
        while lines and not lines[0].strip():
            lines.pop(0)
        if not lines:
            del buffer[: end + separator]
            return self._next_request()
        parts = lines[0].split()
        if len(parts) != 3:
            return HttpResponse.json(400, {"error": "malformed request line"})
        if len(lines) - 1 > _MAX_HEADER_LINES:
            return HttpResponse.json(400, {"error": "too many header lines"})
        # Only two headers matter here; the rest are read past, not collected.
        length_value = b"0"
        connection = b""
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length_value = value
            elif name == b"connection":
                connection = value
        try:
            length = int(length_value)
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY_BYTES:
            return HttpResponse.json(413, {"error": "bad or too large Content-Length"})
        body_start = end + separator
        if len(buffer) < body_start + length:
            return None
        body = bytes(buffer[body_start : body_start + length])
        del buffer[: body_start + length]
        method, target, version = (part.decode("latin-1") for part in parts)
        self._keep_alive = version == "HTTP/1.1" and connection.strip().lower() != b"close"
        if "?" in target or "#" in target or not target.startswith("/"):
            url = urlsplit(target)
            path, query = url.path, parse_qs(url.query)
        else:
            path, query = target, {}
        return self._endpoint._handler(method, path), query, body, f"{method} {path}"

    def _write(self, response: HttpResponse) -> None:
        transport = self._transport
        if transport is None or self._closing:
            return
        keep_alive = self._keep_alive
        head = (
            f"HTTP/1.1 {response.status} {_REASONS.get(response.status, 'Status')}\r\n"
            f"Content-Type: {response.content_type}\r\n"
            f"Content-Length: {len(response.body)}\r\n"
            f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
        )
        transport.write(head.encode("latin-1") + response.body)
        if not keep_alive:
            self._close()

    def _close(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()  # after what is buffered is written


def _route_failed(path: str, error: BaseException) -> HttpResponse:
    # A bug in a route must not take the endpoint down.
    logger.error("HTTP route %s failed", path, exc_info=error)
    return HttpResponse.json(500, {"error": repr(error)})
