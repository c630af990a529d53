"""KafkaClient over bootstrap addresses: any reachable address serves, dead ones are skipped."""

from __future__ import annotations

import asyncio
import random

import pytest
from protocol_helpers import metadata_request

from kraft_engine.protocol import ConnectionConfig, ConnectionFailed, KafkaClient, parse_bootstrap_servers


async def _dead_port() -> int:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    return port


def test_parse_bootstrap_servers_reads_kafkas_list_format():
    assert parse_bootstrap_servers("a:9092, b:9093,[::1]:9094") == [("a", 9092), ("b", 9093), ("::1", 9094)]
    assert parse_bootstrap_servers([("h", 1)]) == [("h", 1)]
    for bad in ("", "nohost", "h:port", ":9092"):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)


async def test_send_fails_over_to_a_reachable_bootstrap_server(make_listener):
    listener = await make_listener()
    dead = await _dead_port()
    config = ConnectionConfig(reconnect_backoff_ms=1, reconnect_backoff_max_ms=10)
    for seed in range(4):  # the starting address is random; every start must end up served
        async with KafkaClient(f"127.0.0.1:{dead},127.0.0.1:{listener.port}", config=config,
                               rng=random.Random(seed)) as client:
            response = await client.send(metadata_request(12, ["x"]))
            assert response.topics[0].name == "x"


async def test_no_reachable_bootstrap_server_is_a_clear_error():
    dead = await _dead_port()
    config = ConnectionConfig(reconnect_backoff_ms=1, reconnect_backoff_max_ms=5)
    async with KafkaClient([("127.0.0.1", dead)], config=config, rng=random.Random(0)) as client:
        with pytest.raises(ConnectionFailed, match=f"no bootstrap server reachable.*127.0.0.1:{dead}"):
            await client.send(metadata_request(12, []), timeout_ms=50)
