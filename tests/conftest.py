"""Shared pytest fixtures."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from failing_disks import FailingDisk
from hypothesis import settings
from kafka_python_sockets import close_failed_sockets
from xdist_scheduling import ModuleScheduling

from kraft_engine.loopback_ports import PORT_RANGE_ENV, picking_range

SmallTmpfs = Callable[[int], Path]

# Hypothesis's per-example deadline (200 ms) is a timing assertion: on a loaded 2-core machine a
# round trip of a large generated record took 590 ms and failed the suite. Every @settings inherits
# this profile's deadline=None, as it is loaded before any test module is imported.
settings.register_profile("kraftwerk", deadline=None)
settings.load_profile("kraftwerk")

_TESTS = Path(__file__).parent


def pytest_configure(config: pytest.Config) -> None:
    """kafka-python's clients close the sockets of failed connection attempts (kafka_python_sockets.py).

    Under pytest-xdist each worker picks the loopback ports of the nodes it starts from a range
    of its own (`KRAFTWERK_PORT_RANGE`, inherited by the processes it starts): a port one worker
    found free and handed to a node that has not bound it yet cannot be handed out by the other."""
    close_failed_sockets()
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return
    index, count = int(worker["workerid"].removeprefix("gw")), int(worker["workercount"])
    ports = picking_range()
    share = len(ports) // count
    if share < 1000:
        raise pytest.UsageError(f"{PORT_RANGE_ENV} leaves {share} ports to each of {count} workers; give it more")
    low = ports.start + index * share
    os.environ[PORT_RANGE_ENV] = f"{low}-{low + share - 1}"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> ModuleScheduling:
    """Under pytest-xdist (`scripts/test` runs two workers), a module's tests stay on one worker,
    in order, and so does the whole Kubernetes tier (tests/xdist_scheduling.py says why)."""
    return ModuleScheduling(config, log)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[SmallTmpfs]:
    """`small_tmpfs(size_bytes)` mounts a tmpfs of that size and returns its path: a real disk that
    fills up (ENOSPC). Skips, with the reason, where this process may not mount (not root, no
    CAP_SYS_ADMIN, no tmpfs). Everything mounted is unmounted at the end."""
    mounted: list[Path] = []

    def mount(size_bytes: int) -> Path:
        target = tmp_path / f"tmpfs-{len(mounted)}"
        target.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(target)],
            capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {result.stderr.strip()}")
        mounted.append(target)
        return target

    try:
        yield mount
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@pytest.fixture
def failing_disk(tmp_path: Path) -> Iterator[Callable[[int], FailingDisk]]:
    """`failing_disk(size_bytes)`: a `FailingDisk` of that size. Skips, with the reason, where no
    loop device can be set up or mounted (not root, no loop driver or free loop device, no
    mkfs.ext4). Everything is unmounted and detached at the end."""
    made: list[FailingDisk] = []

    def make(size_bytes: int) -> FailingDisk:
        image = tmp_path / f"disk-{len(made)}.img"
        target = tmp_path / f"disk-{len(made)}"
        target.mkdir()
        with image.open("wb") as f:
            f.truncate(size_bytes)
        attached = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True,
                                  check=False, timeout=60)
        if attached.returncode != 0:
            pytest.skip(f"cannot set up a loop device here (needs root and the loop driver): {attached.stderr.strip()}")
        disk = FailingDisk(path=target, image=image, device=attached.stdout.strip())
        made.append(disk)
        for command in (["mkfs.ext4", "-q", "-F", disk.device],
                        ["mount", "-o", "noatime,errors=continue", disk.device, str(target)]):
            result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
            if result.returncode != 0:
                pytest.skip(f"cannot make an ext4 file system on {disk.device} here ({command[0]}): {result.stderr.strip()}")
        (target / "lost+found").rmdir()  # not a log directory's entry
        return disk

    try:
        yield make
    finally:
        for disk in reversed(made):
            subprocess.run(["umount", "-l", str(disk.path)], capture_output=True, check=False, timeout=120)
            subprocess.run(["losetup", "--detach", disk.device], capture_output=True, check=False, timeout=60)


@pytest.fixture
def fill_disk() -> Callable[..., Path]:
    """`fill_disk(directory, leave_bytes=0)`: fill its file system with one file (returned)."""
    return _fill


def _fill(directory: Path, *, leave_bytes: int = 0) -> Path:
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        chunk = b"\0" * 4096
        while True:
            try:
                os.write(fd, chunk)
            except OSError:
                break
        if leave_bytes:
            os.ftruncate(fd, max(0, os.fstat(fd).st_size - leave_bytes))
    finally:
        os.close(fd)
    return filler
