"""Kafka's `partition.metadata` file: the topic id a partition directory belongs to.

A directory is named after the topic's *name* (`<topic>-<partition>`), and a name outlives its
topic: delete a topic while a broker is down, create another one with the same name, and the
restarted broker finds a directory whose name matches but whose records belong to the old topic.
Kafka tells the two apart with this file (KIP-516's PartitionMetadataFile), written in every
partition directory before its first append, and a broker treats a directory whose topic id is
not the one the metadata has as a stray. The text is Kafka's exactly:

    version: 0
    topic_id: <the topic id in Kafka's 22-character form>

written with `atomic_replace`, so a crash leaves the old file or the new one.
"""

from __future__ import annotations

import uuid
from pathlib import Path

from kraft_engine.errors import StorageError
from kraft_engine.kafka_uuid import from_kafka_str, to_kafka_str
from kraft_engine.storage.atomic_file import atomic_replace
from kraft_engine.storage.storage_error import storage_io

__all__ = ["PARTITION_METADATA_FILE_NAME", "PartitionMetadataError", "read_partition_metadata",
           "write_partition_metadata"]

PARTITION_METADATA_FILE_NAME = "partition.metadata"
_VERSION = 0


class PartitionMetadataError(StorageError, ValueError):
    """A `partition.metadata` file that is not Kafka's format; the message names the file."""


def write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    text = f"version: {_VERSION}\ntopic_id: {to_kafka_str(topic_id)}\n"
    atomic_replace(directory / PARTITION_METADATA_FILE_NAME, text.encode("ascii"))


def read_partition_metadata(directory: Path) -> uuid.UUID | None:
    """The topic id recorded in `directory`, or None when it has no `partition.metadata`.
    Raises PartitionMetadataError naming the file when it is there but malformed."""
    path = directory / PARTITION_METADATA_FILE_NAME
    if not path.exists():
        return None
    with storage_io("reading", path):
        raw = path.read_bytes()
    lines = raw.decode("ascii", errors="replace").splitlines()
    if len(lines) != 2 or lines[0] != f"version: {_VERSION}" or not lines[1].startswith("topic_id: "):
        raise PartitionMetadataError(f"{path} is not Kafka's partition.metadata (version 0, then topic_id)")
    try:
        return from_kafka_str(lines[1].removeprefix("topic_id: "))
    except ValueError as error:
        raise PartitionMetadataError(f"{path}: {error}") from None
