"""A live workload for the operator's process tests: a kafka-python producer (acks=all, idempotence)
in its own process writing one partition while a lifecycle operation runs, a kafka-python consumer
in a consumer group (its own process too) reading the topic along, and the checks that every record
the producer saw acknowledged is read back afterwards by offset (`lost_records`) and was delivered
to the group's consumer (`unseen_records`).

`LiveCluster.workload` runs both with the lifecycle checker; `producing` and `consuming` are the
pieces."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PRODUCER = REPO / "tests" / "process" / "kafka_python_producer.py"
CONSUMER = REPO / "tests" / "process" / "kafka_python_consumer.py"


@contextmanager
def producing(bootstrap: str, topic: str, acks: Path, *, partition: int = 0) -> Iterator[subprocess.Popen]:
    """The producer runs (one acknowledged record per line into `acks`) until the block ends."""
    with acks.open("w") as out:
        producer = subprocess.Popen([sys.executable, str(PRODUCER), bootstrap, topic, str(partition), "1000000"],
                                    stdout=out, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        yield producer
    finally:
        terminate(producer, timeout_s=60)


@contextmanager
def consuming(bootstrap: str, topic: str, seen: Path, *, group: str) -> Iterator[subprocess.Popen]:
    """A consumer in group `group` (subscribed to `topic`, from the earliest offset) runs until the
    block ends, writing one line per record delivered into `seen`."""
    with seen.open("w") as out:
        consumer = subprocess.Popen([sys.executable, str(CONSUMER), bootstrap, topic, group],
                                    stdout=out, stderr=subprocess.DEVNULL, cwd=REPO)
    try:
        yield consumer
    finally:
        terminate(consumer, timeout_s=60)


def terminate(process: subprocess.Popen, *, timeout_s: float) -> None:
    """SIGTERM (as Ctrl-C would), SIGKILL once `timeout_s` has passed; returns when it is gone."""
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def acked_count(acks: Path) -> int:
    return acks.read_text().count('"offset"')


def read_partition(bootstrap: str, topic: str, *, partition: int = 0) -> dict[int, bytes]:
    """Every record of the partition, by offset, read from the beginning to its end offset."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                                 consumer_timeout_ms=5000, request_timeout_ms=30000)
        try:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            consumer.seek_to_beginning()
            end = consumer.end_offsets([tp])[tp]
            stored: dict[int, bytes] = {}
            deadline = time.monotonic() + 180
            while consumer.position(tp) < end and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=2000).values():
                    for record in records:
                        stored[record.offset] = record.value
            return stored
        finally:
            consumer.close()


def lost_records(acks: Path, stored: dict[int, bytes]) -> tuple[int, list[dict]]:
    """(how many were acknowledged, those not read back with their value)."""
    acked = [json.loads(line) for line in acks.read_text().splitlines() if '"offset"' in line]
    return len(acked), [a for a in acked if stored.get(a["offset"]) != f"v-{a['i']}".encode()]


def seen_count(seen: Path) -> int:
    return seen.read_text().count('"offset"') if seen.exists() else 0


def unseen_records(acks: Path, seen: Path, *, partition: int = 0) -> list[dict]:
    """The acknowledged records of `partition` the group's consumer has not delivered with their value."""
    delivered = set()
    for line in seen.read_text().splitlines() if seen.exists() else ():
        if line.endswith("}"):  # the last line may be half written
            record = json.loads(line)
            if record["partition"] == partition:
                delivered.add((record["offset"], record["value"]))
    acked = [json.loads(line) for line in acks.read_text().splitlines() if '"offset"' in line]
    return [a for a in acked if (a["offset"], f"v-{a['i']}") not in delivered]
