"""The broker's codecs read what clients' codec bindings write, and write what those bindings read."""

from __future__ import annotations

import gzip
import random
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
    COMPRESSION_LEVELS,
    CompressionError,
    UnsupportedCodecError,
    codec_by_name,
    compress,
    decompress,
)

PAYLOAD = b"".join(b"record %d " % i for i in range(20_000))  # > two 32 KiB xerial blocks
_WORDS = [bytes(random.Random(i).choices(b"abcdefghijklmnop", k=2 + i % 8)) for i in range(3000)]
TEXT = b" ".join(random.Random(7).choices(_WORDS, k=60_000))  # compresses differently at each level


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


def test_the_level_ranges_and_defaults_are_kafkas() -> None:
    assert {c: (v.config_key, v.minimum, v.maximum, v.default) for c, v in COMPRESSION_LEVELS.items()} == {
        CODEC_GZIP: ("compression.gzip.level", 1, 9, -1),
        CODEC_LZ4: ("compression.lz4.level", 1, 17, 9),
        CODEC_ZSTD: ("compression.zstd.level", -131072, 22, 3),
    }
    with pytest.raises(ValueError, match="Value must be between 1 and 9 or equal to -1"):
        compress(CODEC_GZIP, PAYLOAD, level=0)
    with pytest.raises(ValueError, match="Value must be no more than 17"):
        compress(CODEC_LZ4, PAYLOAD, level=18)


@pytest.mark.parametrize(("codec", "levels"), [
    (CODEC_GZIP, [-1, 1, 2, 5, 6, 9]),
    (CODEC_LZ4, [1, 2, 3, 8, 9, 10, 12, 17]),
    (CODEC_ZSTD, [-131072, -5, 0, 1, 3, 10, 22]),
])
def test_every_level_is_read_by_the_clients_bindings(codec: int, levels: list[int]) -> None:
    for level in levels:
        assert _CLIENT_READERS[codec](compress(codec, TEXT, level=level)) == TEXT


@pytest.mark.parametrize(("codec", "fast", "strong"), [
    (CODEC_GZIP, 1, 9),
    (CODEC_LZ4, 9, 12),  # Kafka's default 9 is lz4's fast compressor, any other level LZ4HC
    (CODEC_ZSTD, -5, 19),
])
def test_a_stronger_level_stores_fewer_bytes(codec: int, fast: int, strong: int) -> None:
    assert len(compress(codec, TEXT, level=strong)) < len(compress(codec, TEXT, level=fast))


def test_the_default_level_is_kafkas_default() -> None:
    for codec, levels in COMPRESSION_LEVELS.items():
        assert compress(codec, TEXT) == compress(codec, TEXT, level=levels.default)
    assert compress(CODEC_GZIP, TEXT, level=-1) == compress(CODEC_GZIP, TEXT, level=6)  # Deflater's default
    assert compress(CODEC_ZSTD, TEXT, level=0) == compress(CODEC_ZSTD, TEXT, level=3)  # zstd's default
