"""Responses whose record bytes go from a file to the socket with sendfile (Kafka's zero-copy
Fetch, FileRecords.writeTo / TransferableChannel.transferFrom).

A Fetch answer is mostly record batches that sit, byte for byte, in segment files. Reading them
into the process only to write them out again costs a copy each way and the memory of the whole
answer. A handler instead answers with a `SplicedResponse`: the response built around
`FileRegion`s (a byte range of a segment file, with a descriptor of its own, so the segment may be
closed, rolled or deleted meanwhile). The listener encodes the response with a random 16-byte
placeholder in each records field, finds each placeholder in the frame (checking the length
prefix kio wrote before it: an int32 in non-flexible versions, an unsigned varint in flexible
ones), and cuts the frame there into bytes to write and regions to send with `loop.sendfile`,
which uses the kernel's sendfile on a plaintext socket transport.

Where that is not possible the same bytes are sent another way, never different ones: a
transport without native sendfile (a TLS one, another event loop) gets each region read with
pread and written; a placeholder that does not appear exactly once behind its expected prefix
(16 random bytes colliding with other bytes of the frame) makes the listener build the response
again with the regions' bytes read into it. A region the file no longer holds in full when it is
sent (the log was truncated under it) cannot be sent as promised by the frame's sizes: the
connection is closed, as Kafka closes it when FileRecords shrank during a write.
"""

from __future__ import annotations

import io
import os
import secrets
import struct
from collections.abc import Callable
from typing import Any

from kio.serial.writers import write_unsigned_varint
from kio.static.primitive import uvarint

from kraft_engine.invariant import InvariantViolation

__all__ = ["FileRegion", "SplicedFrame", "SplicedResponse"]

_PLACEHOLDER_BYTES = 16
_SIZE = struct.Struct(">i")


class FileRegion:
    """`size` bytes of a file from `position`, through a duplicate of the caller's descriptor."""

    def __init__(self, file: Any, *, position: int, size: int) -> None:
        self.file = file
        self.position = position
        self.size = size

    @classmethod
    def of(cls, fd: int, *, position: int, size: int) -> FileRegion:
        if position < 0 or size <= 0:
            raise ValueError(f"a file region needs a position >= 0 and a positive size, got {position}, {size}")
        # An unbuffered binary file object: what loop.sendfile takes; closing it closes the duplicate.
        return cls(open(os.dup(fd), "rb", buffering=0, closefd=True), position=position, size=size)

    def read(self) -> bytes:
        """The region's bytes (the copy path); shorter when the file was truncated under it."""
        chunks = []
        done = 0
        while done < self.size:
            chunk = os.pread(self.file.fileno(), self.size - done, self.position + done)
            if not chunk:
                break
            chunks.append(chunk)
            done += len(chunk)
        return b"".join(chunks)

    def close(self) -> None:
        self.file.close()


class SplicedFrame:
    """A response frame in parts: bytes to write and regions to send with sendfile, in order."""

    def __init__(self, parts: list[bytes | FileRegion]) -> None:
        self.parts = parts

    def close(self) -> None:
        for part in self.parts:
            if isinstance(part, FileRegion):
                part.close()


RecordsOf = Callable[[FileRegion], bytes]


class SplicedResponse:
    """A response whose records fields are file regions. `build(records_of)` makes the kio
    response, taking each region's records field from `records_of(region)`."""

    def __init__(self, build: Callable[[RecordsOf], Any], regions: list[FileRegion]) -> None:
        self.build = build
        self.regions = regions

    def materialize(self) -> Any:
        """The plain response with every region's bytes read into it (and the regions closed)."""
        try:
            return self.build(lambda region: region.read())
        finally:
            self.close()

    def close(self) -> None:
        for region in self.regions:
            region.close()

    def encode(self, encode_frame: Callable[[Any], bytes]) -> tuple[Any, SplicedFrame | None]:
        """(the response as built with placeholders, its frame cut at the regions), or None for
        the frame when the placeholders cannot be found unambiguously."""
        markers = {id(region): secrets.token_bytes(_PLACEHOLDER_BYTES) for region in self.regions}
        response = self.build(lambda region: markers[id(region)])
        frame = encode_frame(response)
        flexible = bool(getattr(type(response), "__flexible__", False))
        cuts: list[tuple[int, int, FileRegion]] = []  # (start of the prefix, end of the placeholder, region)
        for region in self.regions:
            marker = markers[id(region)]
            at = frame.find(marker)
            if at < 0 or frame.find(marker, at + 1) >= 0:
                return response, None
            prefix = _length_prefix(_PLACEHOLDER_BYTES, flexible=flexible)
            if frame[at - len(prefix):at] != prefix:
                return response, None
            cuts.append((at - len(prefix), at + _PLACEHOLDER_BYTES, region))
        cuts.sort(key=lambda cut: cut[0])
        parts: list[bytes | FileRegion] = []
        position = 0
        growth = 0
        for start, end, region in cuts:
            prefix = _length_prefix(region.size, flexible=flexible)
            parts.append(frame[position:start] + prefix)
            parts.append(region)
            growth += len(prefix) + region.size - (end - start)
            position = end
        parts.append(frame[position:])
        (size,) = _SIZE.unpack_from(frame, 0)
        first = parts[0]
        if not isinstance(first, bytes):
            raise InvariantViolation("a spliced frame starts with its size prefix")
        parts[0] = _SIZE.pack(size + growth) + first[_SIZE.size:]
        return response, SplicedFrame(parts)


def _length_prefix(size: int, *, flexible: bool) -> bytes:
    """How kio writes a records field's length (with kio's own writer): compact (unsigned varint
    of size + 1) in flexible versions, an int32 before them."""
    if not flexible:
        return _SIZE.pack(size)
    out = io.BytesIO()
    write_unsigned_varint(out, uvarint(size + 1))
    return out.getvalue()
