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


async def _read_answers(reader: asyncio.StreamReader, count: int) -> list[tuple[int, bytes]]:
    """`count` answers off a keep-alive connection: (status, body) each."""
    answers = []
    for _ in range(count):
        status = int((await reader.readline()).split()[1])
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.decode("latin-1").partition(":")
            if name.lower() == "content-length":
                length = int(value)
        answers.append((status, await reader.readexactly(length)))
    return answers


async def test_requests_split_anywhere_and_pipelined_behind_a_pending_one_are_answered_in_order() -> None:
    endpoint = HttpEndpoint(registry=CollectorRegistry())
    release = asyncio.Event()

    async def slow(query: dict[str, list[str]], body: bytes) -> HttpResponse:
        await release.wait()
        return HttpResponse.json(200, {"slow": body.decode()})

    async def fast(query: dict[str, list[str]], body: bytes) -> HttpResponse:
        return HttpResponse.json(200, {"fast": query["n"][0]})

    endpoint.route("POST", "/slow", slow)
    endpoint.route("GET", "/fast", fast)
    await endpoint.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    try:
        first = b"POST /slow HTTP/1.1\r\nContent-Length: 5\r\n\r\nfirst"
        for byte in first:  # one byte per segment: the request is parsed only once it is whole
            writer.write(bytes([byte]))
            await writer.drain()
            await asyncio.sleep(0)
        # 2,000 requests pipelined behind the pending one (~100 KB): more than the endpoint
        # buffers, so it stops reading until the first is answered, then serves the rest.
        writer.write(b"".join(b"GET /fast?n=%d HTTP/1.1\r\n\r\n" % n for n in range(2000)))
        await asyncio.sleep(0.05)  # let them arrive while the first is pending
        release.set()
        answers = await asyncio.wait_for(_read_answers(reader, 2001), timeout=30)
        assert answers[0] == (200, b'{"slow": "first"}\n')
        assert answers[1:] == [(200, b'{"fast": "%d"}\n' % n) for n in range(2000)]
    finally:
        writer.close()
        await endpoint.close()


async def test_a_route_that_answers_with_a_future_costs_no_task() -> None:
    # The test store's append answers from its commit's future: a request waiting for its
    # commit holds no task (the stream server held one per connection).
    endpoint = HttpEndpoint(registry=CollectorRegistry())
    pending: list[asyncio.Future[HttpResponse]] = []

    def commit_later(query: dict[str, list[str]], body: bytes) -> asyncio.Future[HttpResponse]:
        answer: asyncio.Future[HttpResponse] = asyncio.get_running_loop().create_future()
        pending.append(answer)
        return answer

    def broken(query: dict[str, list[str]], body: bytes) -> asyncio.Future[HttpResponse]:
        raise RuntimeError("route bug before any future")

    endpoint.route("POST", "/append", commit_later)
    endpoint.route("POST", "/broken", broken)
    await endpoint.start("127.0.0.1", 0)
    connections = [await asyncio.open_connection("127.0.0.1", endpoint.port) for _ in range(8)]
    try:
        for _, writer in connections:
            writer.write(b"POST /append HTTP/1.1\r\nContent-Length: 1\r\n\r\nx")
        while len(pending) < len(connections):
            await asyncio.sleep(0.01)
        assert asyncio.all_tasks() == {asyncio.current_task()}
        for n, answer in enumerate(pending):
            answer.set_result(HttpResponse.json(200, {"offset": n}))
        for n, (reader, _) in enumerate(connections):
            assert await _read_answers(reader, 1) == [(200, b'{"offset": %d}\n' % n)]
        reader, writer = connections[0]
        writer.write(b"POST /broken HTTP/1.1\r\n\r\nPOST /append HTTP/1.1\r\n\r\n")
        [(status, body)] = await _read_answers(reader, 1)
        assert status == 500 and b"route bug before any future" in body
        while len(pending) < len(connections) + 1:  # the connection keeps serving
            await asyncio.sleep(0.01)
        pending[-1].set_result(HttpResponse.json(200, {}))
        assert await _read_answers(reader, 1) == [(200, b"{}\n")]
    finally:
        for _, writer in connections:
            writer.close()
        await endpoint.close()


async def test_a_client_that_closes_its_side_after_a_request_still_gets_the_answer() -> None:
    endpoint = HttpEndpoint(registry=CollectorRegistry())

    async def later(query: dict[str, list[str]], body: bytes) -> HttpResponse:
        await asyncio.sleep(0.01)
        return HttpResponse.json(200, {"ok": True})

    endpoint.route("GET", "/later", later)
    await endpoint.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", endpoint.port)
    try:
        writer.write(b"GET /later HTTP/1.1\r\n\r\n")
        writer.write_eof()
        raw = await asyncio.wait_for(reader.read(), timeout=30)  # then the endpoint closes
        assert raw.startswith(b"HTTP/1.1 200 OK") and raw.endswith(b'{"ok": true}\n')
    finally:
        writer.close()
        await endpoint.close()
