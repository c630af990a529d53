"""The bounds pre-pass: valid frames of every api pass it, lying lengths never reach kio's reader.

kio's native reader aborts the whole process on a length it cannot allocate, so everything that
could reach it with bad bytes runs in a subprocess here.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio_strategies import entities, request_frames

from kraft_engine.protocol import MalformedFrame, kio_version_range, request_class
from kraft_engine.protocol.framing import (
    check_request,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)

REPO = Path(__file__).resolve().parents[2]
DESCRIBE_QUORUM = 55

# The frame of issue #18: DescribeQuorum v2 whose topics array declares 2^32 - 2 items in 5 bytes.
_HEADER_V2 = struct.pack(">hhih", DESCRIBE_QUORUM, 2, 7, 1) + b"x" + b"\x00"
ABORTING_BODY = b"\xff\xff\xff\xff\x0f"


def _all_request_classes() -> list[type]:
    from kio.schema.index import api_key_map

    classes = []
    for api_key in sorted(api_key_map):
        versions = kio_version_range(api_key)
        if versions is None:
            continue
        for version in range(versions[0], versions[1] + 1):
            try:
                classes.append(request_class(api_key, version))
            except KeyError:
                continue
    return classes


REQUEST_CLASSES = _all_request_classes()


def test_kio_native_reader_aborts_on_the_reproducer():
    """The upstream bug still exists (when this fails, kio fixed it: update docs/)."""
    result = subprocess.run([sys.executable, str(REPO / "docs" / "kio_abort_repro.py")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == -6, (result.returncode, result.stderr[-2000:])
    assert "memory allocation of" in result.stderr


def test_the_aborting_frame_is_a_malformed_request_and_the_process_lives():
    code = (
        "import struct\n"
        "from kraft_engine.protocol import MalformedFrame, request_class\n"
        "from kraft_engine.protocol.framing import decode_request\n"
        f"frame = {(_HEADER_V2 + ABORTING_BODY)!r}\n"
        "try:\n"
        "    decode_request(frame, request_class(55, 2))\n"
        "except MalformedFrame as e:\n"
        "    print('refused:', e.part, e)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "refused: body" in result.stdout
    assert "cannot fit" in result.stdout


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (ABORTING_BODY, "array of 4294967294 items cannot fit the 0 bytes left"),
        (b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
        (b"\x02\x05ab", "string length 4 exceeds the 2 bytes left"),  # topic name of 4 in 2 bytes
        (b"\x02\x01\x02\x00\x00\x00\x01\x00\xff\xff\xff\xff\x0f", "tagged fields cannot fit"),
        (b"\x01\x01\x00\x09", "tagged field 0 of 9 bytes exceeds"),
        (b"", "frame ends inside a varint"),
    ],
)
def test_lying_lengths_are_refused_before_kio(body, fragment):
    with pytest.raises(MalformedFrame, match=fragment) as refused:
        check_request(_HEADER_V2 + body, request_class(DESCRIBE_QUORUM, 2))
    assert refused.value.part == "body"


def test_legacy_lengths_are_checked_too():
    """Non-flexible encodings: int32 array counts, int16 string lengths, int32 bytes lengths."""
    header_v1 = struct.pack(">hhih", 3, 4, 1, 1) + b"x"  # Metadata v4: topics is a legacy array
    metadata_v4 = request_class(3, 4)
    with pytest.raises(MalformedFrame, match="array of 2147483647 items"):
        check_request(header_v1 + struct.pack(">i", 2**31 - 1), metadata_v4)
    with pytest.raises(MalformedFrame, match="invalid array length -2"):
        check_request(header_v1 + struct.pack(">i", -2), metadata_v4)
    with pytest.raises(MalformedFrame, match="string length 32767 exceeds"):
        check_request(header_v1 + struct.pack(">ih", 1, 32767) + b"ab", metadata_v4)
    with pytest.raises(MalformedFrame, match=r"malformed request header: .*string length 200"):
        check_request(struct.pack(">hhih", 3, 4, 1, 200) + b"x", metadata_v4)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("cls", REQUEST_CLASSES, ids=lambda c: f"{c.__api_key__}v{c.__version__}")
def test_valid_frames_of_every_request_pass_and_decode_unchanged(cls, data):
    frame = data.draw(request_frames(cls))
    body = frame[4:]
    header_end = check_request(body, cls)
    assert header_end > 0
    header, request = decode_request(body, cls, checked=True)
    assert encode_request(request, correlation_id=header.correlation_id, client_id=header.client_id) == frame


def _all_response_classes() -> list[type]:
    from kraft_engine.protocol import response_class

    out = []
    for cls in REQUEST_CLASSES:
        try:
            out.append(response_class(cls.__api_key__, cls.__version__))
        except KeyError:
            continue
    return out


@settings(max_examples=2, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
@pytest.mark.parametrize("cls", _all_response_classes(), ids=lambda c: f"{c.__api_key__}v{c.__version__}")
def test_valid_responses_of_every_api_pass_the_client_side_check(cls, data):
    response = data.draw(entities(cls))
    frame = encode_response(response, correlation_id=5)
    assert encode_response(decode_response(frame[4:], cls), correlation_id=5) == frame


@pytest.mark.parametrize("version", [4, 12])  # legacy and compact arrays
def test_stepwise_decoding_equals_whole_decoding(version):
    from protocol_helpers import metadata_request

    from kraft_engine.protocol.framing import check_request_arrays, decode_request_stepwise

    cls = request_class(3, version)
    request = metadata_request(version, [f"topic-{i}" for i in range(2500)])
    body = encode_request(request, correlation_id=3, client_id="s")[4:]
    steps = decode_request_stepwise(body, cls, arrays=check_request_arrays(body, cls), items_per_step=100)
    yielded = 0
    while True:
        try:
            next(steps)
            yielded += 1
        except StopIteration as done:
            header, decoded = done.value
            break
    assert yielded == 25
    assert decoded == request and header.correlation_id == 3
    assert (header, decoded) == decode_request(body, cls)
