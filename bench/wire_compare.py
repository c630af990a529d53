"""Issue #18's cases against one running controller (ours or Apache Kafka's), for a side-by-side note.

For each case it prints what the controller did (answered, closed the connection, kept serving)
so the same command run against our controller and against a Kafka 4.1 controller gives the two
columns of docs/issue-18-checklist.md. Prints; asserts nothing.

    .venv/bin/python bench/wire_compare.py 127.0.0.1:9093 [--pid PID]

- the 73-byte DescribeQuorum v2 frame whose array declares 2^32 - 2 items, and the AlterPartition v3
  random body, from tests/process/wire_fuzz_corpus/ (both aborted our node before the fix);
- an unknown api key, an unsupported version, a truncated frame, a 2 GiB size prefix;
- a client that pipelines ApiVersions requests and never reads: how many bytes it could push
  before the controller stopped reading (its own and the controller's socket buffers included);
- an Envelope from a "broker" wrapping a CreateTopics v4 with principal User:alice;
- a connection reset with responses owed.

After each case the controller must still answer ApiVersions; `--pid` adds its RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import struct
import time
from datetime import timedelta
from pathlib import Path

from kio.schema.create_topics.v4 import request as ct4
from kio.schema.create_topics.v4 import response as ct4_response
from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.types import TopicName
from kio.static.primitive import i16, i32, i32Timedelta

from kraft_engine.protocol import KafkaConnection, request_class
from kraft_engine.protocol.envelope import encode_principal
from kraft_engine.protocol.framing import decode_response, encode_request

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "process" / "wire_fuzz_corpus"


def _rss_mib(pid: int | None) -> str:
    if pid is None:
        return ""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return f" RSS {int(line.split()[1]) / 1024:.0f} MiB"
    return ""


def _exchange(address: tuple[str, int], frame: bytes) -> str:
    with socket.create_connection(address, timeout=10) as sock:
        sock.settimeout(10)
        sock.sendall(frame)
        received = b""
        try:
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    return f"closed the connection after {len(received)} response bytes"
                received += chunk
                if len(received) >= 4 and len(received) >= 4 + struct.unpack(">i", received[:4])[0]:
                    return f"answered ({len(received)} bytes)"
        except ConnectionResetError:
            return "reset the connection"
        except TimeoutError:
            return f"no answer, connection open after 10 s ({len(received)} bytes)"


def _alive(address: tuple[str, int]) -> str:
    async def ask() -> str:
        async with KafkaConnection(*address) as connection:
            await connection.connect()
            return "serving"

    try:
        return asyncio.run(ask())
    except Exception as e:
        return f"NOT SERVING ({type(e).__name__})"


def _never_reads(address: tuple[str, int], count: int) -> str:
    frame = encode_request(request_class(18, 3)(client_software_name="x", client_software_version="1"),
                           correlation_id=1, client_id="never-reads")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sock.connect(address)
    sock.setblocking(False)
    sent = 0
    data = frame * count
    deadline = time.monotonic() + 5
    while sent < len(data) and time.monotonic() < deadline:
        try:
            sent += sock.send(data[sent:sent + 65536])
        except BlockingIOError:
            time.sleep(0.01)
    sock.close()
    return f"took {sent // len(frame)} of {count} pipelined requests ({sent} bytes) in 5 s before it stopped reading"


def _envelope(address: tuple[str, int]) -> str:
    inner = encode_request(ct4.CreateTopicsRequest(topics=(ct4.CreatableTopic(
        name=TopicName("via-envelope"), num_partitions=i32(1), replication_factor=i16(1), assignments=(), configs=(),
    ),), timeout=i32Timedelta.parse(timedelta(seconds=5)), validate_only=True), correlation_id=41, client_id="rdkafka")
    request = EnvelopeRequest(request_data=inner[4:], request_principal=encode_principal("User:alice"),
                              client_host_address=bytes([10, 0, 0, 7]))

    async def send() -> str:
        async with KafkaConnection(*address) as connection:
            await connection.connect()
            response = await connection.send(request, timeout_ms=15000)
            if response.response_data is None:
                return f"Envelope error {response.error_code.name}"
            topics = decode_response(response.response_data, ct4_response.CreateTopicsResponse).topics
            return "inner CreateTopics v4: " + ", ".join(f"{t.name} {t.error_code.name} {t.error_message}" for t in topics)

    try:
        return asyncio.run(send())
    except Exception as e:
        return f"{type(e).__name__}: {e}"


def _reset_with_responses_owed(address: tuple[str, int]) -> str:
    sock = socket.create_connection(address)
    frame = encode_request(request_class(18, 3)(client_software_name="x", client_software_version="1"),
                           correlation_id=1, client_id="reset")
    sock.sendall(frame * 200)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    time.sleep(1)
    return "reset sent (count the node's log lines for it)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("address")
    parser.add_argument("--pid", type=int)
    args = parser.parse_args()
    host, port = args.address.rsplit(":", 1)
    address = (host, int(port))
    header_v2 = struct.pack(">hhih", 55, 2, 9, 1) + b"x" + b"\x00"
    cases = [(path.stem, path.read_bytes()) for path in sorted(CORPUS.glob("*.bin"))]
    cases += [
        ("unknown api key 999", struct.pack(">ihhih", 10, 999, 0, 1, 0)),
        ("DescribeQuorum v99", struct.pack(">i", len(header_v2) + 2) + struct.pack(">hhih", 55, 99, 9, 1) + b"x\x00\x01\x00"),
        ("truncated (100 declared, 10 sent)", struct.pack(">i", 100) + b"\x00" * 10),
        ("2 GiB size prefix", struct.pack(">i", 2**31 - 1)),
        ("negative size prefix", struct.pack(">i", -5)),
    ]
    for name, frame in cases:
        outcome = _exchange(address, frame)
        print(f"{name:<40} {outcome:<55} then {_alive(address)}{_rss_mib(args.pid)}", flush=True)
    print(f"{'never reads (20,000 ApiVersions)':<40} {_never_reads(address, 20_000)}; then {_alive(address)}"
          f"{_rss_mib(args.pid)}", flush=True)
    print(f"{'Envelope(CreateTopics v4, User:alice)':<40} {_envelope(address)}", flush=True)
    print(f"{'reset with 200 responses owed':<40} {_reset_with_responses_owed(address)}; then {_alive(address)}",
          flush=True)


if __name__ == "__main__":
    main()
