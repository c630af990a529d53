"""The broker's codecs read what clients' codec bindings write, and write what those bindings read."""

from __future__ import annotations

import gzip
import struct

import lz4.frame
import pytest
import snappy
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.records.compression import (
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    CompressionError,
    UnsupportedCodecError,
    codec_by_name,
    compress,
    decompress,
)

PAYLOAD = b"".join(b"record %d " % i for i in range(20_000))  # > two 32 KiB xerial blocks


def read_xerial(data: bytes) -> bytes:
    magic, version, compatible = struct.unpack_from(">8sii", data)
    assert (magic, version, compatible) == (b"\x82SNAPPY\x00", 1, 1)
    out, position = [], 16
    while position < len(data):
        (length,) = struct.unpack_from(">i", data, position)
        out.append(snappy.decompress(data[position + 4 : position + 4 + length]))
        position += 4 + length
    return b"".join(out)


_CLIENT_READERS = {
    CODEC_GZIP: gzip.decompress,
    CODEC_SNAPPY: read_xerial,
    CODEC_LZ4: lz4.frame.decompress,
    CODEC_ZSTD: lambda d: zstandard.ZstdDecompressor().decompressobj().decompress(d),
}


@pytest.mark.parametrize("codec", sorted(_CLIENT_READERS))
def test_what_the_broker_compresses_the_clients_bindings_read(codec: int) -> None:
    assert _CLIENT_READERS[codec](compress(codec, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
@given(data=st.binary(max_size=70_000))
def test_compress_then_decompress_is_the_identity(codec: int, data: bytes) -> None:
    assert decompress(codec, compress(codec, data)) == data


def test_snappy_reads_the_xerial_framing_and_a_bare_block() -> None:
    assert decompress(CODEC_SNAPPY, snappy.compress(PAYLOAD)) == PAYLOAD
    assert compress(CODEC_SNAPPY, PAYLOAD).startswith(b"\x82SNAPPY\x00")


@pytest.mark.parametrize(
    "damaged",
    [
        b"\x82SNAPPY\x00\x00\x00",  # header cut short
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + struct.pack(">i", 100) + b"xx",  # block past the end
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00",  # length cut short
    ],
)
def test_a_damaged_xerial_frame_is_a_compression_error(damaged: bytes) -> None:
    with pytest.raises(CompressionError):
        decompress(CODEC_SNAPPY, damaged)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_garbage_is_a_compression_error_naming_the_codec(codec: int) -> None:
    with pytest.raises(CompressionError, match=["gzip", "snappy", "lz4", "zstd"][codec - 1]):
        decompress(codec, b"\xff" * 40)


def test_codec_names_are_kafkas_compression_types() -> None:
    assert [codec_by_name(n) for n in ("uncompressed", "gzip", "snappy", "lz4", "zstd")] == [0, 1, 2, 3, 4]
    with pytest.raises(UnsupportedCodecError):
        codec_by_name("brotli")
    with pytest.raises(UnsupportedCodecError):
        decompress(5, b"")
