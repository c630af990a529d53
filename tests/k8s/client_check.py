"""The client pod's program (kafka-python, in the project's image): through the bootstrap Service,
create a topic, produce with acks=all, consume every record back, and report what the brokers said.

    python3 client_check.py BOOTSTRAP TOPIC COUNT

Prints one JSON object: the brokers (id, host, rack) from DescribeCluster, the records acknowledged and the
records read back. Exits 1 when a record is missing or differs.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

_PARTITIONS = 3


def main() -> int:
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    with contextlib.suppress(TopicAlreadyExistsError):
        admin.create_topics([NewTopic(topic, num_partitions=_PARTITIONS, replication_factor=3)])
    described = admin.describe_cluster()
    admin.close()
    brokers = sorted(({"id": b["broker_id"], "host": b["host"], "rack": b["rack"]} for b in described["brokers"]),
                     key=lambda b: b["id"])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10, request_timeout_ms=30_000)
    sent = {}
    deadline = time.monotonic() + 120
    for i in range(count):
        key, value = f"k{i}".encode(), f"record {i}".encode()
        while True:
            try:
                metadata = producer.send(topic, key=key, value=value, partition=i % _PARTITIONS).get(timeout=30)
                break
            except KafkaError:
                # leaders of a topic just created are being elected; retry within the deadline
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        sent[(metadata.partition, metadata.offset)] = (key.decode(), value.decode())
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             consumer_timeout_ms=20_000)
    partitions = [TopicPartition(topic, p) for p in range(_PARTITIONS)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    read = {}
    for record in consumer:
        read[(record.partition, record.offset)] = (record.key.decode(), record.value.decode())
        if len(read) >= len(sent):
            break
    consumer.close()
    report = {"brokers": brokers, "acknowledged": len(sent), "read": len(read), "same": read == sent}
    print(json.dumps(report, sort_keys=True))
    return 0 if read == sent else 1


if __name__ == "__main__":
    sys.exit(main())
