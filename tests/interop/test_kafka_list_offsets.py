"""ListOffsets answers the special timestamps as Apache Kafka 4.1's broker does.

Kafka 4.1 serves ListOffsets v1-v10 and gives these target timestamps a meaning: -1 the log end
(latest), -2 the log start (earliest), -3 the record with the largest timestamp (v7+), -4 the
start of the log kept on local disk (v8+, KIP-405: the log start when nothing is tiered), -5 the
last offset in remote storage (v9+: none without tiered storage). Any other negative timestamp is
refused with UNSUPPORTED_VERSION (seen from Kafka's broker, which this test asks). The same records, with the same log start, are asked about
on (1) our controller and broker and (2) one Kafka 4.1 combined node, and every answer (error,
timestamp, offset, leader epoch) must be the same; `kafka-get-offsets --time -4 / -5` then prints
the same on both.

Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import time
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.list_offsets.v10.request import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from kraft_engine.protocol import KafkaConnection

from .kafka_jars import kafka_tool, needs_jars
from .single_nodes import kafka_node, kafka_started
from .test_kafka_configs_tool import our_controller_and_broker
from .test_mixed_brokers import _DEADLINE_S, _running, _until

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

_TOPIC = "stamped"
# Record timestamps, in offset order, the largest not the last; recent, or time-based retention
# (7 days) deletes the records at once.
_BASE_MS = int(time.time()) * 1000 - 600_000
_STAMPS = tuple(_BASE_MS + s for s in (1000, 3000, 2000, 5000, 4000, 4500))
_ASKED = (-1, -2, -3, -4, -5, -6, -7, -1000, 0, *(_BASE_MS + s for s in (1500, 3000, 4200, 5000, 6000)))


def _list_offsets(port: int) -> list[tuple[int, int, int, int, int]]:
    """(asked timestamp, error, timestamp, offset, leader epoch) for each of `_ASKED`, one request each."""
    async def exchange() -> list[tuple[int, int, int, int, int]]:
        answers = []
        async with KafkaConnection("127.0.0.1", port) as connection:
            await connection.connect()
            for asked in _ASKED:
                response = await connection.send(ListOffsetsRequest(
                    replica_id=BrokerId(-1), isolation_level=i8(0), timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), topics=(
                        ListOffsetsTopic(name=TopicName(_TOPIC), partitions=(ListOffsetsPartition(
                            partition_index=i32(0), current_leader_epoch=i32(-1), timestamp=i64(asked)),)),)))
                [partition] = response.topics[0].partitions
                answers.append((asked, int(partition.error_code), int(partition.timestamp), int(partition.offset),
                                int(partition.leader_epoch)))
        return answers
    return asyncio.run(exchange())


def _prepare(bootstrap: str, tmp_path: Path) -> None:
    """The topic with `_STAMPS`, its first record deleted (log start 1)."""
    import confluent_kafka

    created = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", bootstrap, "--create", "--topic",
                         _TOPIC, "--partitions", "1", "--replication-factor", "1", timeout_s=_DEADLINE_S)
    assert created.returncode == 0, created.stdout + created.stderr
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for stamp in _STAMPS:  # one batch each: a batch's timestamps are looked up record by record
        producer.produce(_TOPIC, value=b"v", partition=0, timestamp=stamp)
        assert producer.flush(60) == 0
    deletion = tmp_path / "delete.json"
    deletion.write_text(json.dumps({"partitions": [{"topic": _TOPIC, "partition": 0, "offset": 1}], "version": 1}))
    deleted = kafka_tool("org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", bootstrap,
                         "--offset-json-file", str(deletion), timeout_s=_DEADLINE_S)
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr


def _get_offsets(bootstrap: str) -> dict[str, str]:
    found = {}
    for flag in ("-4", "earliest-local", "-5", "latest-tiered", "-3", "-2", "-1"):
        result = kafka_tool("org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", bootstrap, "--topic", _TOPIC,
                            "--time", flag, timeout_s=_DEADLINE_S)
        found[flag] = f"{result.returncode} {result.stdout}"
    return found


@needs_jars
@pytest.mark.timeout(900)
def test_special_timestamps_are_answered_as_kafkas_broker_answers(tmp_path: Path) -> None:
    static = {"offsets.topic.replication.factor": "1"}
    with our_controller_and_broker(tmp_path, static) as (port, _):
        _prepare(f"127.0.0.1:{port}", tmp_path)
        our_answers = _list_offsets(port)
        our_tool = _get_offsets(f"127.0.0.1:{port}")

    kafka = kafka_node(tmp_path, static)
    with _running(kafka.commands):
        _until(lambda: kafka_started(tmp_path), "the Kafka node to start")
        _prepare(kafka.bootstrap, tmp_path)
        kafka_answers = _list_offsets(kafka.port)
        kafka_tool_lines = _get_offsets(kafka.bootstrap)

    assert our_answers == kafka_answers
    assert our_tool == kafka_tool_lines
    # Not vacuous: the answers hold the special values' meanings (log start 1, end 6, largest at 3).
    assert {asked: tuple(answer) for asked, *answer in kafka_answers if asked in (-2, -3, -4, -5, -7)} == {
        -2: (0, -1, 1, 0), -3: (0, _STAMPS[3], 3, 0), -4: (0, -1, 1, 0), -5: (0, -1, -1, -1),
        -7: (int(ErrorCode.unsupported_version), -1, -1, -1)}
