"""An independent client library, kafka-python, completes its ApiVersions handshake against our
listener over a loopback socket and reads what we advertise."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from protocol_helpers import echo_metadata

from kraft_engine.protocol import Listener

# kafka-python loads its schemas through importlib.resources' legacy API.
pytestmark = [
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def _handshake(port: int) -> tuple[dict[int, tuple[int, int]], object]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka.net.compat import KafkaNetClient
        from kafka.protocol.metadata import ApiVersionsRequest

    client = KafkaNetClient(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=10000)
    try:
        node = client.cluster.bootstrap_brokers()[0].node_id
        client.await_ready(node, timeout_ms=10000)  # connect + ApiVersions negotiation
        advertised = dict(client._manager._conns[node].broker_version_data.api_versions)
        explicit = client.send_and_receive(
            node,
            ApiVersionsRequest(version=3, client_software_name="kafka-python", client_software_version="3.0"),
            timeout_ms=10000,
        )
        return advertised, explicit
    finally:
        client.close()


async def test_kafka_python_negotiates_api_versions_with_our_listener():
    listener = Listener()
    listener.register(3, min_version=0, max_version=12, handler=echo_metadata)
    await listener.start()
    try:
        advertised, explicit = await asyncio.to_thread(_handshake, listener.port)
    finally:
        await listener.close()
    assert advertised == {3: (0, 12), 18: (0, 4)}
    assert explicit.error_code == 0
    assert {(k.api_key, k.min_version, k.max_version) for k in explicit.api_keys} == {(3, 0, 12), (18, 0, 4)}
