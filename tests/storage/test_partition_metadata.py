"""Kafka's `partition.metadata`: the exact text Kafka writes, read back, and malformed files refused
with the file named."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.storage.partition_metadata import (
    PartitionMetadataError,
    read_partition_metadata,
    write_partition_metadata,
)


def test_the_file_is_kafkas_text_and_reads_back(tmp_path: Path) -> None:
    topic_id = uuid.uuid4()
    write_partition_metadata(tmp_path, topic_id)
    text = (tmp_path / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {to_kafka_str(topic_id)}\n"
    assert read_partition_metadata(tmp_path) == topic_id
    other = uuid.uuid4()
    write_partition_metadata(tmp_path, other)  # replaced whole
    assert read_partition_metadata(tmp_path) == other


def test_a_directory_without_the_file_has_no_topic_id(tmp_path: Path) -> None:
    assert read_partition_metadata(tmp_path) is None


@pytest.mark.parametrize("text", [
    "", "version: 1\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\n", "version: 0\n", "version: 0\ntopic: x\n",
    "version: 0\ntopic_id: not-a-uuid\n", "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA\nextra\n",
])
def test_a_malformed_file_is_refused_with_its_path(tmp_path: Path, text: str) -> None:
    (tmp_path / "partition.metadata").write_text(text)
    with pytest.raises(PartitionMetadataError, match=r"partition\.metadata"):
        read_partition_metadata(tmp_path)
