"""A kafka-python consumer in a consumer group, as its own process, for workloads that outlive a broker.

The counterpart of `kafka_python_producer.py` (its own process for the same reason: kafka-python's
leaked sockets to a killed broker die with it). Usage: `python kafka_python_consumer.py BOOTSTRAP
TOPIC GROUP`. It joins GROUP (subscribe, so the group coordinator assigns the partitions and
rebalances them when members or coordinators change), starts from the earliest offset when the
group has none committed, commits automatically (kafka-python's defaults otherwise), and prints one
JSON line per record delivered: {"partition", "offset", "value"}. It runs until SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import warnings
from types import FrameType


def main(argv: list[str]) -> int:
    bootstrap, topic, group = argv[0], argv[1], argv[2]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka import KafkaConsumer

        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=True, request_timeout_ms=30000)
        while not stopping:
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
                    print(json.dumps({"partition": record.partition, "offset": record.offset,
                                      "value": record.value.decode()}), flush=True)
        consumer.close(autocommit=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
