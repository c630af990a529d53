"""The node's HTTP endpoint: metrics, routes, keep-alive, and bad requests answered, not crashed on."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry, Counter

from kraft_engine.server.http_endpoint import HttpEndpoint, HttpResponse


async def _exchange(port: int, raw: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        await writer.drain()
        return await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()


async def test_routes_metrics_and_keep_alive() -> None:
    registry = CollectorRegistry()
    Counter("kraftwerk_test_events", "events", registry=registry).inc(3)
    endpoint = HttpEndpoint(registry=registry)

    async def echo(query: dict[str, list[str]], body: bytes) -> HttpResponse:
        return HttpResponse.json(200, {"query": query, "body": body.decode()})

    endpoint.route("POST", "/echo", echo)
    await endpoint.start("127.0.0.1", 0)
    try:
        raw = await _exchange(
            endpoint.port,
            b"POST /echo?from=3 HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"
            b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
        )
        first, _, rest = raw.partition(b"\r\n\r\n")
        assert first.startswith(b"HTTP/1.1 200 OK") and b"Connection: keep-alive" in first
        assert rest.startswith(b'{"query": {"from": ["3"]}, "body": "hi"}')
        assert b"kraftwerk_test_events_total 3.0" in rest
        missing = await _exchange(endpoint.port, b"GET /nowhere HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert missing.startswith(b"HTTP/1.1 404")
        wrong_method = await _exchange(endpoint.port, b"GET /echo HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert wrong_method.startswith(b"HTTP/1.1 405")
    finally:
        await endpoint.close()


async def test_malformed_requests_get_an_error_and_the_endpoint_keeps_serving() -> None:
    endpoint = HttpEndpoint(registry=CollectorRegistry())

    async def boom(query: dict[str, list[str]], body: bytes) -> HttpResponse:
        raise RuntimeError("route bug")

    endpoint.route("GET", "/boom", boom)
    await endpoint.start("127.0.0.1", 0)
    try:
        assert (await _exchange(endpoint.port, b"garbage\r\n\r\n")).startswith(b"HTTP/1.1 400")
        too_big = b"POST /x HTTP/1.1\r\nContent-Length: 999999999999\r\n\r\n"
        assert (await _exchange(endpoint.port, too_big)).startswith(b"HTTP/1.1 413")
        failed = await _exchange(endpoint.port, b"GET /boom HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert failed.startswith(b"HTTP/1.1 500") and b"route bug" in failed
        metrics = await _exchange(endpoint.port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        assert metrics.startswith(b"HTTP/1.1 200")
    finally:
        await endpoint.close()
