"""The one exception a failed write to the node's storage becomes: `StorageIOError`.

A write, fsync, truncate, rename or delete that fails on the metadata log, a snapshot or
`quorum-state` leaves the file in a state the process can no longer describe (a short write
leaves part of a batch behind the in-memory log end; a failed fsync may have dropped dirty pages
the kernel will never retry). Kafka's answer for the metadata log is to stop the process: its
`LogDirFailureChannel` turns the `IOException` into a `KafkaStorageException` and the raft
client's fault handler exits. We do the same, and this type is how the I/O shell recognises
such a fault: it names the file, its directory and the OS error in one line, and it is *not* an
`OSError`, so no handler written for a socket's `OSError` can swallow it by accident.

`storage_io(operation, path)` wraps the system calls that change files. A short write is turned
into the OS error the next write would have raised by writing the rest (`write_fully`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from kraft_engine.errors import StorageError

__all__ = ["StorageIOError", "storage_io", "write_fully"]


class StorageIOError(StorageError):
    """A file of the node's storage could not be changed; the process must stop (see module doc)."""

    def __init__(self, *, operation: str, path: Path, reason: str) -> None:
        self.operation = operation
        self.path = path
        self.directory = path.parent
        self.reason = reason
        super().__init__(f"Error while {operation} {path.name} in dir {path.parent}: {reason}")


@contextlib.contextmanager
def storage_io(operation: str, path: Path) -> Iterator[None]:
    """Turn an `OSError` raised inside into a `StorageIOError` for `path` ("writing", "fsyncing"...)."""
    try:
        yield
    except OSError as e:
        raise StorageIOError(operation=operation, path=path, reason=_describe(e)) from e


def write_fully(fd: int, data: bytes | memoryview, *, path: Path) -> None:
    """Write all of `data` at the file offset; a full device raises its own OS error (ENOSPC)."""
    view = memoryview(data)
    with storage_io("writing", path):
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(f"write returned {written} with {len(view)} bytes left")
            view = view[written:]


def _describe(error: OSError) -> str:
    # The path is already in the message; OSError's str() would repeat the file name.
    if error.errno is not None and error.strerror:
        return f"[Errno {error.errno}] {error.strerror}"
    return str(error)
