"""Fuzzing a live quorum's controller listener: no frame may end the node or move its leadership.

Three real controller processes (the quorum controller, not the test state machine). Hypothesis
generates a valid request frame for every api key and version the leader's listener advertises in
ApiVersions, then mutates it: flipped bytes, lengths overwritten with huge or negative values,
truncations, extra bytes, or a lying size prefix. Each frame goes to the active controller on a
fresh connection; the node may answer or close that connection, and afterwards it must still be
running, with the same leader and epoch, and answer a normal DescribeQuorum.

Valid frames carry a foreign cluster id wherever the schema has one: raft requests with the
right cluster id would legitimately move leadership (a Vote in a higher epoch), which is raft
working, not the wire layer failing.

Every frame that ever ended a node is kept in `wire_fuzz_corpus/` and replayed first; a frame
that kills the node during a run is written there before the test fails.

The broker's listener (the same `protocol.Listener`) gets the same treatment: one controller and
one broker, frames to the broker's PLAINTEXT listener; afterwards the broker still runs, is still
ready (caught up and unfenced), and answers ApiVersions.

Short run: part of the suite (`WIRE_FUZZ_EXAMPLES`, default 150). Long run:

    WIRE_FUZZ_EXAMPLES=30000 .venv/bin/pytest tests/process/test_wire_fuzz.py -q -p no:cacheprovider --timeout 0
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import socket
import struct
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from broker_processes import BrokerCluster, start_cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from quorum_processes import HOST, ProcessCluster, describe_status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "protocol"))
from kio_strategies import entities

from kraft_engine.protocol import KafkaConnection, request_class
from kraft_engine.protocol.framing import encode_request

pytestmark = pytest.mark.process

CORPUS = Path(__file__).parent / "wire_fuzz_corpus"
EXAMPLES = int(os.environ.get("WIRE_FUZZ_EXAMPLES", "150"))
_FOREIGN_CLUSTER = "fuzz-not-this-cluster"
_LENGTHS = [b"\xff\xff\xff\xff\x0f", b"\xfe\xff\xff\xff\x07", b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00",
            b"\xff\xff\xff\xfe", b"\x7f\xff", b"\x80\x01", b"\xff\xff", b"\x00\x00\x00\x00"]


@dataclasses.dataclass
class LiveQuorum:
    cluster: ProcessCluster
    leader: int
    epoch: int
    served: list[tuple[int, int]]

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.cluster.nodes[self.leader].port


def _has_schema(api_key: int, version: int) -> bool:
    try:
        request_class(api_key, version)
    except KeyError:
        return False
    return True


async def _served_versions(address: tuple[str, int]) -> list[tuple[int, int]]:
    """Every (api, version) the node advertises that kio can build frames of. A broker lists
    Produce from v0 as Kafka 4.1 does (KAFKA-18659) but closes the connection on v0-2, which kio
    has no schema for; `test_listener.py` covers those."""
    async with KafkaConnection(*address) as connection:
        await connection.connect()
        return [(key, version) for key, (low, high) in sorted(connection.peer_api_versions.items())
                for version in range(low, high + 1) if _has_schema(key, version)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveQuorum]:
    cluster = ProcessCluster(root=tmp_path_factory.mktemp("wire-fuzz"))
    cluster.extra_config["kraftwerk.test.state.machine.enable"] = "false"
    try:
        for node_id in (1, 2, 3):
            cluster.add_node(node_id)
        cluster.format_initial([1, 2, 3])
        cluster.start_all([1, 2, 3])
        leader = cluster.wait_for_leader()
        status = describe_status(cluster, bootstrap_ids=[leader])
        served = asyncio.run(_served_versions((HOST, cluster.nodes[leader].port)))
        yield LiveQuorum(cluster, leader, int(status["leaderEpoch"]), served)
    finally:
        cluster.cleanup()


def _exchange(address: tuple[str, int], frame: bytes) -> None:
    """Send one frame and read until the node answers, closes, or 5 s pass."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.settimeout(5)
        try:
            sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass


def _assert_alive(live: LiveQuorum, frame: bytes) -> None:
    process = live.cluster.nodes[live.leader].process
    assert process is not None
    if process.poll() is not None:
        CORPUS.mkdir(exist_ok=True)
        name = f"crash-{hashlib.sha256(frame).hexdigest()[:16]}.bin"
        (CORPUS / name).write_bytes(frame)
        pytest.fail(f"the leader exited with {process.returncode} on frame {frame.hex()} (saved as {name})\n"
                    f"{live.cluster.log(live.leader)[-3000:]}")


def _assert_unmoved(live: LiveQuorum) -> None:
    status = describe_status(live.cluster, bootstrap_ids=[live.leader])
    assert (status["leaderId"], status["leaderEpoch"]) == (live.leader, live.epoch)
    for node_id, node in live.cluster.nodes.items():
        assert node.process is not None and node.process.poll() is None, f"controller {node_id} exited"


def _foreign(entity: Any) -> Any:
    """The entity with a cluster id that is not this cluster's wherever its schema has one."""
    if any(f.name == "cluster_id" for f in dataclasses.fields(entity)):
        return dataclasses.replace(entity, cluster_id=_FOREIGN_CLUSTER)
    return entity


@st.composite
def _mutated_frames(draw: st.DrawFn, served: list[tuple[int, int]]) -> bytes:
    api_key, version = draw(st.sampled_from(served))
    request = _foreign(draw(entities(request_class(api_key, version))))
    body = bytearray(encode_request(request, correlation_id=draw(st.integers(0, 2**31 - 1)), client_id="fuzz")[4:])
    kind = draw(st.sampled_from(["valid", "flip", "length", "truncate", "extra", "lying-prefix"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            at = draw(st.integers(0, len(body) - 1))
            body[at] ^= draw(st.integers(1, 255))
    elif kind == "length":
        value = draw(st.sampled_from(_LENGTHS))
        at = draw(st.integers(4, max(4, len(body) - 1)))  # past api key and version
        body[at:at + len(value)] = value
    elif kind == "truncate":
        del body[draw(st.integers(4, max(4, len(body) - 1))):]
    elif kind == "extra":
        body += draw(st.binary(min_size=1, max_size=64))
    size = len(body)
    if kind == "lying-prefix":
        size = draw(st.sampled_from([len(body) + 1, len(body) - 1, 2**31 - 1, -1, 0]))
    return struct.pack(">i", size) + bytes(body)


def test_every_frame_that_ever_ended_a_node_is_survived(live: LiveQuorum) -> None:
    frames = sorted(CORPUS.glob("*.bin"))
    assert len(frames) >= 2
    for path in frames:
        frame = path.read_bytes()
        _exchange(live.address, frame)
        _assert_alive(live, frame)
    _assert_unmoved(live)


def test_mutated_frames_of_every_served_api_and_version(live: LiveQuorum) -> None:
    # Every api the controller listener serves is in the sample, Envelope and the raft apis included.
    served_apis = {key for key, _ in live.served}
    assert {1, 19, 20, 52, 55, 56, 58, 62, 63}.issubset(served_apis)

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=False, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frame=_mutated_frames(live.served))
    def one(frame: bytes) -> None:
        _exchange(live.address, frame)
        _assert_alive(live, frame)

    one()
    _assert_unmoved(live)
    # Not vacuous: frames were decoded and handled, and malformed ones were refused as such.
    metrics = live.cluster.http_text(live.leader, "/metrics")
    malformed = [line for line in metrics.splitlines()
                 if line.startswith("kafka_network_malformed_requests_total{") and not line.endswith(" 0.0")]
    handled = {line.split('request="')[1].split('"')[0] for line in metrics.splitlines()
               if line.startswith("kafka_network_requests_total{")}
    assert malformed, metrics
    accepted = sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
                   if line.startswith("kafka_network_connections_accepted_total{"))
    assert accepted >= EXAMPLES  # every example reached the node on its own connection
    assert len(handled) >= min(10, EXAMPLES // 15), handled


@dataclasses.dataclass
class LiveBroker:
    cluster: BrokerCluster
    broker: int
    served: list[tuple[int, int]]

    @property
    def address(self) -> tuple[str, int]:
        return HOST, self.cluster.broker_ports[self.broker]


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveBroker]:
    cluster = BrokerCluster(root=tmp_path_factory.mktemp("wire-fuzz-broker"))
    try:
        start_cluster(cluster, controllers=1, brokers=1)
        served = asyncio.run(_served_versions((HOST, cluster.broker_ports[101])))
        yield LiveBroker(cluster, 101, served)
    finally:
        cluster.cleanup()


def test_mutated_frames_of_every_api_and_version_the_broker_serves(live_broker: LiveBroker) -> None:
    assert {0, 1, 3, 18}.issubset({key for key, _ in live_broker.served})  # Produce, Fetch, Metadata, ApiVersions
    process = live_broker.cluster.nodes[live_broker.broker].process
    assert process is not None

    @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(frame=_mutated_frames(live_broker.served))
    def one(frame: bytes) -> None:
        _exchange(live_broker.address, frame)
        if process.poll() is not None:
            CORPUS.mkdir(exist_ok=True)
            name = f"broker-crash-{hashlib.sha256(frame).hexdigest()[:16]}.bin"
            (CORPUS / name).write_bytes(frame)
            pytest.fail(f"the broker exited with {process.returncode} on frame {frame.hex()} (saved as {name})")

    one()
    assert process.poll() is None
    assert live_broker.cluster.ready(live_broker.broker)
    assert asyncio.run(_served_versions(live_broker.address)) == live_broker.served
