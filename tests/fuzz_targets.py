"""What is fuzzed with atheris, and the contract each parser keeps on any input.

Every parser here takes bytes a peer or a disk can hand the node: the request decoders of every
api and version the listeners serve (broker, controller and raft apis, the Envelope's forwarded
principal, the consumer protocol inside JoinGroup), the record-batch readers (a Produce payload's
validation, a log's batches with their records, the metadata records in them), the snapshot reader
and meta.properties. The contract of each: on any input it returns, or raises the one error its
callers turn into a clear refusal (MalformedFrame closes the connection alone, ProduceRefused
answers the partition with an error code, CorruptBatchError / SnapshotError / MetaPropertiesError
name the bad file). Any other exception is a crash: atheris stops, prints the input and keeps it
as `crash-<sha1>`.

`python tests/fuzz_targets.py <target> [libFuzzer flags] [corpus dir]` runs one target under
atheris with coverage instrumentation of `kraft_engine` (bench/fuzz.py runs them long; the test
suite runs each briefly with a fixed seed). Each target starts from a seed corpus of valid inputs
(`seeds(target)`), so the fuzzer mutates real frames, batches and files instead of guessing them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["SCRATCH_ENV", "TARGETS", "broken_meta_properties_target", "run", "seeds", "served_requests"]

SCRATCH_ENV = "KRAFT_FUZZ_SCRATCH"


@functools.cache
def served_requests() -> tuple[tuple[int, int], ...]:
    """Every (api key, version) a listener of ours decodes: the broker's client, replica, log,
    group and forwarded apis, the controller's apis, raft's apis, and ApiVersions, SASL and Envelope."""
    from kraft_engine.server.broker_apis import CLIENT_API_VERSIONS
    from kraft_engine.server.controller_apis import KAFKA_CONTROLLER_VERSIONS
    from kraft_engine.server.forwarding import FORWARDED_API_VERSIONS
    from kraft_engine.server.group_apis import GROUP_API_VERSIONS
    from kraft_engine.server.log_apis import LOG_API_VERSIONS
    from kraft_engine.server.raft_apis import RAFT_API_VERSIONS
    from kraft_engine.server.replica_apis import REPLICA_API_VERSIONS

    ranges: dict[int, tuple[int, int]] = {18: (0, 4), 17: (1, 1), 36: (0, 2), 58: (0, 0)}
    for table in (CLIENT_API_VERSIONS, REPLICA_API_VERSIONS, LOG_API_VERSIONS, GROUP_API_VERSIONS,
                  FORWARDED_API_VERSIONS, KAFKA_CONTROLLER_VERSIONS, RAFT_API_VERSIONS):
        for key, (low, high) in table.items():
            known = ranges.get(key, (low, high))
            ranges[key] = (min(known[0], low), max(known[1], high))
    return tuple((key, version) for key in sorted(ranges) for version in range(ranges[key][0], ranges[key][1] + 1))


def _request_frame(data: bytes) -> tuple[bytes, type]:
    """The first four bytes name the (api key, version); one not served picks a served pair by
    its value. A valid header for it follows, then the rest of the input as the body. (A saved
    input keeps meaning the same request when the listeners serve more.)"""
    from kraft_engine.protocol.entities import request_class

    served = served_requests()
    head = data[:4].ljust(4, b"\0")
    wanted = (int.from_bytes(head[:2], "big"), int.from_bytes(head[2:], "big"))
    key, version = wanted if wanted in _served_set() else served[int.from_bytes(head, "big") % len(served)]
    cls = request_class(key, version)
    return _header_bytes(cls) + data[4:], cls


@functools.cache
def _served_set() -> frozenset[tuple[int, int]]:
    return frozenset(served_requests())


@functools.cache
def _header_bytes(cls: type) -> bytes:
    """The request header a client sends before a `cls` body (v1, or v2 for a flexible body)."""
    from kraft_engine.protocol.entities import request_class
    from kraft_engine.protocol.framing import SIZE_PREFIX, encode_request

    # ApiVersions v0 has no fields and a v1 header: its frame is that header alone.
    header = bytearray(encode_request(request_class(18, 0)(), correlation_id=7, client_id="fuzz")[SIZE_PREFIX.size:])
    header[0:4] = int(cls.__api_key__).to_bytes(2, "big") + int(cls.__version__).to_bytes(2, "big")
    if cls.__flexible__:
        header.append(0)  # header v2: no tagged fields
    return bytes(header)


def request_target(data: bytes) -> None:
    """The listener's decoding of one request: bounds check, decode (whole, and item by item as
    a large frame is), the Envelope's forwarded request and principal."""
    from kraft_engine.protocol.envelope import EnvelopeError, decode_principal
    from kraft_engine.protocol.errors import MalformedFrame
    from kraft_engine.protocol.framing import (
        check_request_arrays,
        decode_request,
        decode_request_stepwise,
        peek_api,
    )

    frame, cls = _request_frame(data)
    try:
        peek_api(frame)
        _header, body = decode_request(frame, cls)
    except MalformedFrame:
        return
    try:
        arrays = check_request_arrays(frame, cls)
        steps = decode_request_stepwise(frame, cls, arrays=arrays, items_per_step=2)
        while True:
            next(steps)
    except StopIteration as done:
        if done.value[1] != body:
            raise AssertionError("the stepwise decoding read another body than the whole decoding") from None
    if int(cls.__api_key__) == 58:
        with contextlib.suppress(EnvelopeError):
            decode_principal(body.request_principal)
        inner = bytes(body.request_data)
        try:
            inner_key, inner_version = peek_api(inner)
        except MalformedFrame:
            return
        if (inner_key, inner_version) in _served_set():
            from kraft_engine.protocol.entities import request_class

            with contextlib.suppress(MalformedFrame):
                decode_request(inner, request_class(inner_key, inner_version))
    if int(cls.__api_key__) == 11:  # JoinGroup: the consumer protocol inside each member's metadata
        from kraft_engine.records.consumer_protocol import read_assignment, read_subscription

        for protocol in body.protocols:
            read_subscription(bytes(protocol.metadata))
            read_assignment(bytes(protocol.metadata))


def _with_valid_crcs(data: bytes) -> bytes:
    """`data` with the CRC of every batch its length fields frame recomputed: a mutated batch then
    reaches the record parsing behind the CRC check instead of stopping at it."""
    from crc32c import crc32c

    out = bytearray(data)
    position = 0
    while position + 21 <= len(out):
        end = position + 12 + int.from_bytes(out[position + 8:position + 12], "big", signed=True)
        if end <= position + 21 or end > len(out):
            break
        out[position + 17:position + 21] = crc32c(bytes(out[position + 21:end])).to_bytes(4, "big")
        position = end
    return bytes(out)


def produce_target(data: bytes) -> None:
    """A Produce payload as the partition leader validates it (and recompresses it when the topic
    asks); flag 0x20 makes every CRC valid, 0x40 a compacted topic."""
    from kraft_engine.broker.record_validation import ProduceRefused, validate_produce_payload

    flags = data[0] if data else 0
    target = (None, 0, 1, 2, 3, 4)[flags % 6]
    payload = _with_valid_crcs(data[1:]) if flags & 0x20 else data[1:]
    with contextlib.suppress(ProduceRefused):
        validate_produce_payload(payload, max_message_bytes=1 << 20, now_ms=1_700_000_000_000,
                                 compacted=bool(flags & 0x40), target_codec=target, produce_version=9 + (flags >> 7))


def batches_target(data: bytes) -> None:
    """A log's bytes as readers take them: whole batches with their records, control records and
    the metadata records in a metadata log's batches (first byte 1: every CRC made valid)."""
    from kraft_engine.records.framing import decode_metadata_record
    from kraft_engine.records.log_batch import parse_batches
    from kraft_engine.records.metadata_registry import MetadataRecordError

    try:
        batches = parse_batches(_with_valid_crcs(data[1:]) if data[:1] == b"\x01" else data[1:])
    except ValueError:  # CorruptBatchError, ControlRecordError, ... (every records error is one)
        return
    for batch in batches:
        for value in _records_or_refused(batch):
            with contextlib.suppress(MetadataRecordError, ValueError):
                decode_metadata_record(value)


def _records_or_refused(batch: Any) -> tuple[bytes, ...]:
    """A batch's record values, or none when the reader refuses them: `LogBatch.records` decodes
    them on first read (not at parse), so its refusal (CorruptBatchError, a ValueError) comes there."""
    try:
        return tuple(batch.records)
    except ValueError:
        return ()


def snapshot_target(data: bytes) -> None:
    """A snapshot file as a node reads it: its batches validated (CRC, offsets, header first,
    footer last), then parsed and their metadata records decoded, as raft hands them to the
    controller and the loader (every CRC made valid, so the fuzzer explores what lies behind it)."""
    from kraft_engine.errors import SnapshotError
    from kraft_engine.records.framing import decode_metadata_record
    from kraft_engine.records.log_batch import parse_batches
    from kraft_engine.records.metadata_registry import MetadataRecordError
    from kraft_engine.storage.snapshots import SnapshotId, SnapshotReader, snapshot_file_name

    directory = _scratch()
    snapshot_id = SnapshotId(end_offset=100, epoch=1)
    (directory / snapshot_file_name(snapshot_id)).write_bytes(_with_valid_crcs(data))
    try:
        with SnapshotReader(directory, snapshot_id) as reader:
            raws = [raw for _, raw in reader.batches()]
    except SnapshotError:
        return
    for raw in raws:
        try:
            batches = parse_batches(raw)
        except ValueError:  # a batch whose records do not decode: CorruptBatchError
            continue
        for batch in batches:
            for value in _records_or_refused(batch):
                with contextlib.suppress(MetadataRecordError, ValueError):
                    decode_metadata_record(value)


def meta_properties_target(data: bytes) -> None:
    """meta.properties as a node reads it at startup."""
    from kraft_engine.storage.meta_properties import MetaPropertiesError, read_meta_properties

    directory = _scratch()
    (directory / "meta.properties").write_bytes(data)
    with contextlib.suppress(MetaPropertiesError):
        read_meta_properties(directory)


def broken_meta_properties_target(data: bytes) -> None:
    """A deliberately broken variant (the harness's own test): the reader's refusal escapes, as
    an unexpected error from a parser would."""
    from kraft_engine.storage.meta_properties import read_meta_properties

    directory = _scratch()
    (directory / "meta.properties").write_bytes(data)
    read_meta_properties(directory)


@functools.cache
def _scratch() -> Path:
    """One directory for the file targets: `$KRAFT_FUZZ_SCRATCH` (the caller removes it), else a
    new one on tmpfs when there is one (a run writes thousands of files)."""
    given = os.environ.get(SCRATCH_ENV)
    if given:
        return Path(given)
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    return Path(tempfile.mkdtemp(prefix="kraft-fuzz-", dir=base))


TARGETS: dict[str, Callable[[bytes], None]] = {
    "requests": request_target,
    "produce": produce_target,
    "batches": batches_target,
    "snapshot": snapshot_target,
    "meta-properties": meta_properties_target,
}
_EACH = tuple(TARGETS.values())


def all_target(data: bytes) -> None:
    """Every target in one process (the test suite's short run): the first byte picks one."""
    if data:
        _EACH[data[0] % len(_EACH)](data[1:])


TARGETS["all"] = all_target


def seeds(target: str) -> Iterator[bytes]:
    """Valid inputs for `target` to start from."""
    if target == "all":
        for index, name in enumerate(list(TARGETS)[:len(_EACH)]):
            yield from (bytes([index]) + seed for seed in seeds(name))
        return
    from kraft_engine.records.client_records import ProducedRecord, encode_client_batch
    from kraft_engine.records.log_batch import build_data_batch

    batch = encode_client_batch([ProducedRecord(key=b"k", value=b"seed"), ProducedRecord(value=b"two")])
    if target == "requests":
        yield from _request_seeds()
    elif target == "produce":
        yield b"\x20" + batch
        yield b"\x61" + encode_client_batch([ProducedRecord(key=b"k", value=b"v" * 100)], codec=1)
        yield b"\x23" + encode_client_batch([ProducedRecord(key=b"k", value=b"v" * 100)], codec=4)
    elif target == "batches":
        yield b"\x01" + batch
        yield b"\x01" + _metadata_batch() + build_data_batch([b"x"], base_offset=3, epoch=1, timestamp_ms=0)
    elif target == "snapshot":
        yield _snapshot_bytes()
    elif target == "meta-properties":
        yield (b"#\n#Thu Nov 26 09:00:00 UTC 2026\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rMgQ\nversion=1\n"
               b"cluster.id=MkU3OEVBNTcwNTJENDM2Qw\n")
        yield b"version=0\nbroker.id=3\ncluster.id=abc\n"


def _request_seeds() -> Iterator[bytes]:
    """For each served (api, version): its key and version, then a body a client sends (an ApiVersions-like
    empty body, and bodies of the apis clients send most, encoded by kio)."""
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
    from kio.schema.types import TopicName

    from kraft_engine.protocol.entities import request_class
    from kraft_engine.protocol.framing import SIZE_PREFIX, encode_request

    served = served_requests()
    bodies: dict[tuple[int, int], object] = {
        (3, 12): MetadataRequest(topics=(MetadataRequestTopic(name=TopicName("t"), topic_id=None),),
                                 allow_auto_topic_creation=True, include_topic_authorized_operations=True),
    }
    for key, version in served:
        prefix = key.to_bytes(2, "big") + version.to_bytes(2, "big")
        cls = request_class(key, version)
        body = bodies.get((key, version))
        if body is None:
            yield prefix + (b"\x00" if cls.__flexible__ else b"")
            continue
        frame = encode_request(body, correlation_id=7, client_id="fuzz")[SIZE_PREFIX.size:]
        yield prefix + frame[len(_header_bytes(cls)):]


def _metadata_batch() -> bytes:
    from kio.schema.types import TopicName

    from kraft_engine.kafka_uuid import ZERO_UUID
    from kraft_engine.records.framing import encode_metadata_record
    from kraft_engine.records.log_batch import build_data_batch
    from kraft_engine.records.metadata_records import TopicRecord

    record = encode_metadata_record(TopicRecord(name=TopicName("orders"), topic_id=ZERO_UUID))
    return build_data_batch([record, record], base_offset=0, epoch=1, timestamp_ms=0)


@functools.cache
def _snapshot_bytes() -> bytes:
    from kio.schema.types import TopicName

    from kraft_engine.kafka_uuid import ZERO_UUID
    from kraft_engine.records.framing import encode_metadata_record
    from kraft_engine.records.metadata_records import TopicRecord
    from kraft_engine.storage.snapshots import SnapshotId, SnapshotWriter

    directory = _scratch() / "seed-snapshot"
    directory.mkdir(exist_ok=True)
    writer = SnapshotWriter(directory, snapshot_id=SnapshotId(end_offset=100, epoch=1), last_contained_log_timestamp_ms=0,
                            timestamp_ms=0)
    writer.append([encode_metadata_record(TopicRecord(name=TopicName("orders"), topic_id=ZERO_UUID))])
    return writer.freeze().read_bytes()


def run(target: str, argv: list[str]) -> None:
    """Fuzz `target` under atheris (libFuzzer flags and corpus directories in `argv`)."""
    import atheris

    with atheris.instrument_imports(include=["kraft_engine"]):
        import kraft_engine.broker.record_validation
        import kraft_engine.protocol.bounds_checking
        import kraft_engine.protocol.envelope
        import kraft_engine.protocol.framing
        import kraft_engine.records.batches
        import kraft_engine.records.consumer_protocol
        import kraft_engine.records.control
        import kraft_engine.records.framing
        import kraft_engine.records.log_batch
        import kraft_engine.storage.java_properties
        import kraft_engine.storage.meta_properties
        import kraft_engine.storage.snapshots  # noqa: F401
    function = TARGETS[target]
    if os.environ.get("KRAFT_FUZZ_BROKEN") == "meta-properties":
        function = broken_meta_properties_target
    corpus = [a for a in argv if not a.startswith("-")]
    if not corpus:
        seed_dir = _scratch() / f"seeds-{target}"
        seed_dir.mkdir(exist_ok=True)
        for number, seed in enumerate(seeds(target)):
            (seed_dir / f"seed-{number}").write_bytes(seed)
        argv = [*argv, str(seed_dir)]
    atheris.Setup([sys.argv[0], *argv], function)
    atheris.Fuzz()


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {{{','.join(TARGETS)}}} [libFuzzer flags] [corpus dir]")
    run(sys.argv[1], sys.argv[2:])
