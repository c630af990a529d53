"""Durable small-file writes: the one way the engine replaces a file that must survive a crash.

`quorum-state`, `meta.properties`, the leader-epoch checkpoint and the offset checkpoints are
all rewritten whole. A crash in the middle of an in-place rewrite would leave a torn file, and a
torn `quorum-state` could let a node vote twice in one epoch. So every such write goes through
`atomic_replace`: write `<name>.tmp`, fsync it, rename it over `<name>`, fsync the directory.
At every instant the name refers either to the complete old file or to the complete new one.
A leftover `.tmp` from a crash is simply overwritten by the next write and ignored by readers.
A failure of any step raises `StorageIOError` naming the file (`storage_error`).
"""

from __future__ import annotations

import os
from pathlib import Path

from kraft_engine.storage.storage_error import storage_io, write_fully

__all__ = ["TMP_SUFFIX", "atomic_replace", "fsync_dir", "fsync_file"]

TMP_SUFFIX = ".tmp"


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created, renamed or removed in it are durable."""
    with storage_io("fsyncing the directory", path):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync an existing file's data and metadata."""
    with storage_io("fsyncing", path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_replace(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Order matters: the temporary file is fsynced *before* the rename (otherwise the rename could
    reach the disk before the data and expose an empty file), and the directory is fsynced
    *after* it (otherwise the rename itself could be lost and the old content come back).
    """
    tmp = path.with_name(path.name + TMP_SUFFIX)
    with storage_io("creating", tmp):
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_fully(fd, data, path=tmp)
        with storage_io("fsyncing", tmp):
            os.fsync(fd)
    finally:
        os.close(fd)
    with storage_io(f"renaming {tmp.name} to", path):
        os.replace(tmp, path)
    fsync_dir(path.parent)
