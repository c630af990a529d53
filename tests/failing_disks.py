"""A disk that fails on demand, for the tests of what a storage error does (the `failing_disk`
fixture in conftest.py makes them). Device-mapper's `error` and `flakey` targets are the usual
tool; this machine's kernel has no device-mapper (`dmsetup version`: "/dev/mapper/control: open
failed: No such device"), so the disk is a loop device, whose every block past the end of its
backing file fails with EIO.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


class FailingDisk:
    """A real block device (a loop device over an image file) formatted ext4 and mounted at
    `path`, that `fail()` turns into a disk whose every block read or write fails with EIO."""

    def __init__(self, *, path: Path, image: Path, device: str) -> None:
        self.path = path
        self.image = image
        self.device = device
        self._files: list[Path] = []

    def settle(self) -> None:
        """Write back every dirty page of the file system (syncfs) and drop its files' cached
        pages, so the next read of any file there goes to the device."""
        subprocess.run(["sync", "--file-system", str(self.path)], check=True, capture_output=True, timeout=120)
        self._files = [f for f in self.path.rglob("*") if f.is_file() and not f.is_symlink()]
        self._drop_cached_pages()

    def fail(self) -> None:
        """From now on the device has no blocks: its image is cut to nothing and the loop driver
        told (LOOP_SET_CAPACITY), so each read or write of a block is past its end and fails with
        EIO, as a dead disk's do. Pages already cached would still read: call `settle` first
        (the pages of the files it found are dropped once more here)."""
        os.truncate(self.image, 0)
        subprocess.run(["losetup", "--set-capacity", self.device], check=True, capture_output=True, timeout=60)
        self._drop_cached_pages()

    def _drop_cached_pages(self) -> None:
        for file in self._files:
            fd = os.open(file, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
