"""One node process: config with Kafka's keys, listeners, wiring, and the metrics/health endpoint."""

__all__: list[str] = []
