"""The wire layer's Prometheus counters and the request-time histogram, named after Kafka's
`kafka.network` request metrics.

A node usually runs several listeners (controller, broker, internal) against one registry.
prometheus-client refuses to register the same metric name twice in a registry, so the counters
are created once per registry and shared, and every sample carries a `listener` label.
"""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["ListenerMetrics", "metrics_for"]


_TOTAL_TIME_BUCKETS_MS = (1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class ListenerMetrics:
    """Counters shared by all listeners on one registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.requests = Counter(
            "kafka_network_requests",
            "Requests received and dispatched, by listener and api.",
            ["listener", "request"],
            registry=registry,
        )
        self.errors = Counter(
            "kafka_network_errors",
            "Error codes carried by responses (NONE included), by listener, api and error.",
            ["listener", "request", "error"],
            registry=registry,
        )
        self.malformed_requests = Counter(
            "kafka_network_malformed_requests",
            "Requests that could not be decoded (their connection is closed), by listener and api.",
            ["listener", "request"],
            registry=registry,
        )
        self.total_time_ms = Histogram(
            "kafka_network_requestmetrics_totaltimems",
            "Time from a decoded request to its encoded response, in ms (Kafka's RequestMetrics TotalTimeMs, "
            "less the socket), by listener and api.",
            ["listener", "request"],
            buckets=_TOTAL_TIME_BUCKETS_MS,
            registry=registry,
        )
        self.file_region_bytes = Counter(
            "kraftwerk_network_file_region_bytes",
            "Response bytes sent from files (Fetch records), by listener and how: `sendfile` (the kernel "
            "copied them from the file to the socket) or `copy` (read and written: no native sendfile).",
            ["listener", "mode"],
            registry=registry,
        )
        self.connections_accepted = Counter(
            "kafka_network_connections_accepted",
            "Connections accepted, by listener.",
            ["listener"],
            registry=registry,
        )
        self.connections_closed = Counter(
            "kafka_network_connections_closed",
            "Connections closed, by listener and reason.",
            ["listener", "reason"],
            registry=registry,
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, ListenerMetrics] = weakref.WeakKeyDictionary()


def metrics_for(registry: CollectorRegistry) -> ListenerMetrics:
    """The one ListenerMetrics of `registry`, created on first use."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = ListenerMetrics(registry)
        _BY_REGISTRY[registry] = metrics
    return metrics
