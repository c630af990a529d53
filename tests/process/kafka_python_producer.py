"""A kafka-python producer as its own process, for workloads that outlive a broker.

kafka-python leaks the sockets of connection attempts to a broker that was killed; in a separate
process they die with it instead of surfacing as unraisable warnings in whichever test collects
them. Usage: `python kafka_python_producer.py BOOTSTRAP TOPIC PARTITION COUNT [KILL_AT PID]`.
It sends COUNT records `v-<i>` one at a time with acks=all and kafka-python's defaults
(idempotence on, retries), SIGKILLs PID just before record KILL_AT, and prints one JSON line per
record: {"i", "partition", "offset"} when acknowledged, {"i", "error"} when not.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings


def main(argv: list[str]) -> int:
    bootstrap, topic, partition, count = argv[0], argv[1], int(argv[2]), int(argv[3])
    kill_at, victim = (int(argv[4]), int(argv[5])) if len(argv) > 5 else (-1, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=2,
                                 request_timeout_ms=30000)
        for i in range(count):
            if i == kill_at:
                os.kill(victim, signal.SIGKILL)
            try:
                metadata = producer.send(topic, value=f"v-{i}".encode(), partition=partition).get(timeout=120)
            except Exception as error:  # reported, never counted as acknowledged
                print(json.dumps({"i": i, "error": repr(error)}), flush=True)
                continue
            print(json.dumps({"i": i, "partition": metadata.partition, "offset": metadata.offset}), flush=True)
        producer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
