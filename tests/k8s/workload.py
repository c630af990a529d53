"""The live workload of the lifecycle scenarios (a pod of the project's image, kafka-python): it
produces while the operator rolls and scales the cluster, then checks that nothing acknowledged
was lost.

    python3 workload.py BOOTSTRAP TOPIC STOP_FILE

1. Creates TOPIC (3 partitions, replication factor 3, min.insync.replicas 2).
2. Produces numbered records with acks=all and idempotence, one at a time, until STOP_FILE exists
   (the test creates it with `kubectl exec`). A send the cluster does not acknowledge within its
   delivery timeout is counted as failed and not expected back; every acknowledged one is.
   While it produces, a consumer in the group `lifecycle-check` reads the topic along.
3. Once stopped, that consumer reads on until it has seen every acknowledged record (or 180 s pass).

Prints progress lines (`acked N`), then one JSON object as its last line: acknowledged, failed,
read, and the acknowledged records never read back (`lost`). Exits 1 when one is lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

_PARTITIONS = 3
_READ_BACK_S = 180.0


def _create_topic(bootstrap: str, topic: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, num_partitions=_PARTITIONS, replication_factor=3,
                                              topic_configs={"min.insync.replicas": "2"})])
            admin.close()
            return
        except KafkaError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def main() -> int:
    bootstrap, topic, stop_file = sys.argv[1], sys.argv[2], sys.argv[3]
    _create_topic(bootstrap, topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             retries=2**31 - 1, request_timeout_ms=20_000, delivery_timeout_ms=120_000,
                             max_in_flight_requests_per_connection=1)
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="lifecycle-check",
                             auto_offset_reset="earliest", enable_auto_commit=True)
    acked: set[str] = set()
    read: set[str] = set()
    failed = 0
    sequence = 0

    def read_some(timeout_ms: int) -> None:
        with contextlib.suppress(KafkaError):
            for records in consumer.poll(timeout_ms=timeout_ms).values():
                read.update(r.value.decode() for r in records)

    while not os.path.exists(stop_file):
        value = f"record-{sequence}"
        sequence += 1
        try:
            producer.send(topic, key=value.encode(), value=value.encode()).get(timeout=150)
            acked.add(value)
        except KafkaError as e:
            failed += 1
            print(f"not acknowledged: {value}: {e!r}", flush=True)
            time.sleep(1)
        if sequence % 100 == 0:
            print(f"acked {len(acked)} failed {failed} read {len(read)}", flush=True)
            read_some(0)
        time.sleep(0.02)
    producer.close()
    deadline = time.monotonic() + _READ_BACK_S
    while not acked <= read and time.monotonic() < deadline:
        read_some(1000)
    consumer.close()
    lost = sorted(acked - read, key=lambda v: int(v.split("-")[1]))
    report = {"acknowledged": len(acked), "failed": failed, "read": len(read & acked), "lost": lost[:20],
              "lostCount": len(lost)}
    print(json.dumps(report, sort_keys=True), flush=True)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
