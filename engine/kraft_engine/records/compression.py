"""The four compression codecs of Kafka's v2 record batches, through one native library (cramjam).

A v2 batch compresses its records section as a whole; the codec is in attribute bits 0-2. The
broker must read every codec a client may send (it validates records before storing the batch as
received) and the log cleaner must write them back when it drops records from a compressed batch.
cramjam carries all four in one Rust extension with wheels for every platform we run on, so the
engine has a single codec dependency instead of four C bindings.

What each codec means on Kafka's wire, and how it is read here:

- gzip (1): a gzip stream (RFC 1952).
- snappy (2): Java clients write xerial's framing (an 8-byte magic `\\x82SNAPPY\\0`, two int32
  versions, then blocks of int32 length + raw snappy); librdkafka reads that framing and some
  producers write a bare raw snappy block. Both are read; the framing is written, as Java does.
- lz4 (3): the LZ4 frame format (KIP-57 fixed the header checksum for magic 1+; v2 batches use
  the standard frame).
- zstd (4): a zstd frame, with or without the content size.

Any decoding failure is a CompressionError (Kafka answers CORRUPT_MESSAGE); a codec number outside
0-4 is an UnsupportedCodecError (Kafka's UNSUPPORTED_COMPRESSION_TYPE).

Compression levels are Kafka's (KIP-390, `compression.gzip.level`, `compression.lz4.level`,
`compression.zstd.level`; `COMPRESSION_LEVELS` holds each range and default) and mean what they
mean to Kafka's Java code, mapped onto cramjam's:

- gzip: java.util.zip's Deflater levels 1-9; the default -1 is Deflater's default, level 6.
- lz4: Kafka's default 9 is lz4-java's *fast* compressor (not LZ4HC), any other level LZ4HC at that
  level. lz4 itself caps LZ4HC at 12, so 13-17 compress as 12 (in lz4-java too). lz4 1.10, which
  cramjam carries, has no HC mode below level 2: Kafka's levels 1 and 2 are lz4's level 2 here.
- zstd: zstd's own levels, -131072 (fastest) to 22; 0 is zstd's default, 3, which is Kafka's.

Snappy has no level.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import cramjam

from kraft_engine.errors import RecordsError

__all__ = [
    "CODEC_GZIP",
    "CODEC_LZ4",
    "CODEC_NAMES",
    "CODEC_NONE",
    "CODEC_SNAPPY",
    "CODEC_ZSTD",
    "COMPRESSION_LEVELS",
    "CompressionError",
    "CompressionLevels",
    "UnsupportedCodecError",
    "codec_by_name",
    "compress",
    "compression_level_problem",
    "decompress",
]

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {CODEC_NONE: "none", CODEC_GZIP: "gzip", CODEC_SNAPPY: "snappy", CODEC_LZ4: "lz4", CODEC_ZSTD: "zstd"}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK_LENGTH = struct.Struct(">i")
# xerial's SnappyOutputStream default block size, which Kafka's Java producer uses.
_XERIAL_BLOCK_BYTES = 32 * 1024


@dataclass(frozen=True, slots=True)
class CompressionLevels:
    """One codec's compression levels as Kafka's config key for it accepts them."""

    config_key: str
    minimum: int
    maximum: int
    default: int

    def problem(self, level: int) -> str | None:
        """Kafka's validator message for a level outside the range, None when it is accepted."""
        if self.config_key == "compression.gzip.level":
            # Kafka's gzip validator: a Deflater level or Deflater's DEFAULT_COMPRESSION.
            if level == self.default or self.minimum <= level <= self.maximum:
                return None
            return f"Value must be between {self.minimum} and {self.maximum} or equal to {self.default}"
        if level < self.minimum:
            return f"Value must be at least {self.minimum}"
        if level > self.maximum:
            return f"Value must be no more than {self.maximum}"
        return None


COMPRESSION_LEVELS = {
    CODEC_GZIP: CompressionLevels("compression.gzip.level", 1, 9, -1),
    CODEC_LZ4: CompressionLevels("compression.lz4.level", 1, 17, 9),
    CODEC_ZSTD: CompressionLevels("compression.zstd.level", -131072, 22, 3),
}
"""Kafka 4.1's per-codec levels (KIP-390): the config key, its range and its default."""

_DEFLATER_DEFAULT_LEVEL = 6  # java.util.zip.Deflater's DEFAULT_COMPRESSION
_LZ4_FAST = 0  # cramjam: lz4's fast (non-HC) compressor
_LZ4_LOWEST_HC = 2


def compression_level_problem(key: str, level: int) -> str | None:
    """Kafka's validator message when `level` is outside the range of the level key `key`."""
    for levels in COMPRESSION_LEVELS.values():
        if levels.config_key == key:
            return levels.problem(level)
    raise ValueError(f"{key} is not a compression level key")


class CompressionError(RecordsError, ValueError):
    """Compressed records that do not decode with their batch's codec."""


class UnsupportedCodecError(CompressionError):
    """A codec number Kafka does not define."""


def codec_by_name(name: str) -> int:
    """The codec number of Kafka's `compression.type` name (`uncompressed` and `none` are 0)."""
    if name == "uncompressed":
        return CODEC_NONE
    for codec, codec_name in CODEC_NAMES.items():
        if codec_name == name:
            return codec
    raise UnsupportedCodecError(f"unknown compression type {name!r}")


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records section of a batch compressed with `codec`, decompressed."""
    if codec == CODEC_NONE:
        return bytes(data)
    try:
        if codec == CODEC_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == CODEC_SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec == CODEC_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == CODEC_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as error:
        raise CompressionError(f"{CODEC_NAMES[codec]} data does not decompress: {error}") from None
    raise UnsupportedCodecError(f"compression codec {codec} is not one of Kafka's (0-4)")


def compress(codec: int, data: bytes | memoryview, *, level: int | None = None) -> bytes:
    """`data` compressed the way Kafka's Java code writes `codec`, at Kafka's `level` for that
    codec (None: Kafka's default level); a level outside Kafka's range is a ValueError."""
    levels = COMPRESSION_LEVELS.get(codec)
    if level is not None and levels is not None and levels.problem(level) is not None:
        raise ValueError(f"compression level {level} for {CODEC_NAMES[codec]}: {levels.problem(level)}")
    if codec == CODEC_NONE:
        return bytes(data)
    if codec == CODEC_GZIP:
        gzip_level = _DEFLATER_DEFAULT_LEVEL if level is None or level == -1 else level
        return bytes(cramjam.gzip.compress(data, level=gzip_level))
    if codec == CODEC_SNAPPY:
        view = memoryview(data)
        parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
        for start in range(0, len(view), _XERIAL_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK_BYTES]))
            parts.append(_XERIAL_BLOCK_LENGTH.pack(len(block)))
            parts.append(block)
        return b"".join(parts)
    if codec == CODEC_LZ4:
        fast = level is None or level == COMPRESSION_LEVELS[CODEC_LZ4].default
        return bytes(cramjam.lz4.compress(data, level=_LZ4_FAST if fast else max(level or 0, _LZ4_LOWEST_HC)))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=COMPRESSION_LEVELS[CODEC_ZSTD].default if level is None else level))
    raise UnsupportedCodecError(f"compression codec {codec} is not one of Kafka's (0-4)")


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    if len(data) < _XERIAL_HEADER.size:
        raise CompressionError("snappy data has a truncated xerial header")
    parts = []
    position = _XERIAL_HEADER.size
    while position < len(data):
        if position + _XERIAL_BLOCK_LENGTH.size > len(data):
            raise CompressionError(f"snappy data ends inside a block length at byte {position}")
        (length,) = _XERIAL_BLOCK_LENGTH.unpack_from(data, position)
        position += _XERIAL_BLOCK_LENGTH.size
        if length < 0 or position + length > len(data):
            raise CompressionError(f"a snappy block of {length} bytes runs past the end of the data")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[position : position + length])))
        position += length
    return b"".join(parts)
