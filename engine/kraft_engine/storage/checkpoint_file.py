"""Kafka's text checkpoint files: a version line, a count line, then one entry per line.

Kafka keeps small per-partition and per-log-dir facts in this format: `leader-epoch-checkpoint`
(inside a partition directory; entries `epoch startOffset`) and, at the log-directory level,
`recovery-point-offset-checkpoint` and `log-start-offset-checkpoint` (entries
`topic partition offset`). Version is 0 for all of them. We read and write the same text so a
directory can move between Kafka and kraftwerk, and `kafka-dump-log`-style tools keep working.

Reading is strict: a wrong version, a count that does not match the lines, or an unparseable
line is a `CheckpointError` naming the file and the line. Writes are atomic (tmp + fsync +
rename + dir fsync), so a crash leaves the previous checkpoint, never a torn one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from kraft_engine.errors import StorageError
from kraft_engine.storage.atomic_file import atomic_replace

__all__ = [
    "LEADER_EPOCH_CHECKPOINT_FILE_NAME",
    "LOG_START_OFFSET_CHECKPOINT_FILE_NAME",
    "RECOVERY_POINT_CHECKPOINT_FILE_NAME",
    "CheckpointError",
    "EpochEntry",
    "read_leader_epoch_checkpoint",
    "read_offset_checkpoint",
    "write_leader_epoch_checkpoint",
    "write_offset_checkpoint",
]

LEADER_EPOCH_CHECKPOINT_FILE_NAME = "leader-epoch-checkpoint"
RECOVERY_POINT_CHECKPOINT_FILE_NAME = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT_FILE_NAME = "log-start-offset-checkpoint"

_VERSION = 0

# (epoch, start offset): the first offset written in that leader epoch.
EpochEntry = tuple[int, int]


class CheckpointError(StorageError):
    """A checkpoint file that exists but is malformed; the message names the file and the problem."""


def _read_entries(path: Path, *, fields: int) -> list[list[str]]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"Malformed checkpoint file {path}: missing version or count line")
    if lines[0].strip() != str(_VERSION):
        raise CheckpointError(f"Unrecognized version of the checkpoint file {path}: {lines[0]!r}")
    try:
        expected = int(lines[1].strip())
    except ValueError:
        raise CheckpointError(f"Malformed count line in checkpoint file {path}: {lines[1]!r}") from None
    entries = lines[2:]
    if len(entries) != expected:
        raise CheckpointError(
            f"Expected {expected} entries in checkpoint file {path}, but found {len(entries)}"
        )
    parsed = []
    for line_number, line in enumerate(entries, start=3):
        parts = line.split()
        if len(parts) != fields:
            raise CheckpointError(f"Malformed line {line_number} in checkpoint file {path}: {line!r}")
        parsed.append(parts)
    return parsed


def _write_entries(path: Path, entries: list[str]) -> None:
    text = "".join(f"{line}\n" for line in [str(_VERSION), str(len(entries)), *entries])
    atomic_replace(path, text.encode("utf-8"))


def read_leader_epoch_checkpoint(path: Path) -> list[EpochEntry]:
    """Entries in file order; FileNotFoundError when absent, CheckpointError when malformed."""
    result: list[EpochEntry] = []
    for parts in _read_entries(path, fields=2):
        try:
            result.append((int(parts[0]), int(parts[1])))
        except ValueError:
            raise CheckpointError(f"Malformed entry {' '.join(parts)!r} in checkpoint file {path}") from None
    return result


def write_leader_epoch_checkpoint(path: Path, entries: Iterable[EpochEntry]) -> None:
    _write_entries(path, [f"{epoch} {offset}" for epoch, offset in entries])


def read_offset_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """`{(topic, partition): offset}`; FileNotFoundError when absent, CheckpointError when malformed."""
    result: dict[tuple[str, int], int] = {}
    for parts in _read_entries(path, fields=3):
        try:
            result[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise CheckpointError(f"Malformed entry {' '.join(parts)!r} in checkpoint file {path}") from None
    return result


def write_offset_checkpoint(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    _write_entries(path, [f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items())])
