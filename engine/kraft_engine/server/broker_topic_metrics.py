"""Per-topic traffic of a broker, named after Kafka's `kafka.server:type=BrokerTopicMetrics` meters
in Prometheus form (a counter per meter, labelled by topic; rates are Prometheus's `rate()`).

- `bytesin` / `messagesin`: record batches a leader appended for Produce (bytes as stored, records
  counted from the batch headers), counted once the append succeeded.
- `bytesout`: record bytes sent to consumers by Fetch; `replicationbytesout`: to followers.
- `failedproducerequests` / `failedfetchrequests`: partitions answered with an error.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

__all__ = ["BrokerTopicMetrics"]

_PREFIX = "kafka_server_brokertopicmetrics_"


class BrokerTopicMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        def counter(name: str, documentation: str) -> Counter:
            return Counter(_PREFIX + name, documentation, ["topic"], registry=registry)

        self.bytes_in = counter("bytesin", "Bytes of record batches appended by Produce (BytesInPerSec).")
        self.messages_in = counter("messagesin", "Records appended by Produce (MessagesInPerSec).")
        self.bytes_out = counter("bytesout", "Record bytes fetched by consumers (BytesOutPerSec).")
        self.replication_bytes_out = counter("replicationbytesout",
                                             "Record bytes fetched by followers (ReplicationBytesOutPerSec).")
        self.failed_produce_requests = counter("failedproducerequests",
                                               "Partitions of Produce requests answered with an error "
                                               "(FailedProduceRequestsPerSec).")
        self.failed_fetch_requests = counter("failedfetchrequests",
                                             "Partitions of Fetch requests answered with an error "
                                             "(FailedFetchRequestsPerSec).")

    def produced(self, topic: str, *, size_bytes: int, records: int) -> None:
        self.bytes_in.labels(topic).inc(size_bytes)
        self.messages_in.labels(topic).inc(records)

    def fetched(self, topic: str, *, size_bytes: int, by_follower: bool) -> None:
        if size_bytes:
            (self.replication_bytes_out if by_follower else self.bytes_out).labels(topic).inc(size_bytes)
