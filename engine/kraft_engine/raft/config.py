"""Quorum configuration: Kafka's `controller.quorum.*` knobs with Kafka's defaults.

The consensus core reads timing and sizing only from here, so a test or a simulation can shrink
the timeouts without touching the algorithm, and a server maps Kafka's config keys onto it 1:1.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RaftConfig"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    """One field per Kafka key; the name is the key without the `controller.quorum.` prefix."""

    # controller.quorum.election.timeout.ms
    election_timeout_ms: int = 1000
    # controller.quorum.election.backoff.max.ms
    election_backoff_max_ms: int = 1000
    # controller.quorum.fetch.timeout.ms
    fetch_timeout_ms: int = 2000
    # controller.quorum.request.timeout.ms
    request_timeout_ms: int = 2000
    # controller.quorum.retry.backoff.ms
    retry_backoff_ms: int = 20
    # controller.quorum.append.linger.ms
    append_linger_ms: int = 25
    # controller.quorum.fetch.max.bytes (KIP-1219, Kafka 4.3; a Fetch always returns at least
    # one whole batch)
    fetch_max_bytes: int = 1024 * 1024
    # controller.quorum.fetch.snapshot.max.bytes (KIP-1219, Kafka 4.3)
    fetch_snapshot_max_bytes: int = 1024 * 1024
    # controller.quorum.auto.join.enable
    auto_join_enable: bool = False
    # How long a Fetch that found nothing new is parked (the follower's max wait). Kafka has no
    # key for it: KafkaRaftClient.MAX_FETCH_WAIT_MS is a constant 500 ms.
    fetch_max_wait_ms: int = 500
    # Kafka's leader batch caps (KafkaRaftClient.MAX_BATCH_SIZE_BYTES / MAX_NUMBER_OF_BATCHES).
    max_batch_size_bytes: int = 8 * 1024 * 1024
    max_number_of_batches: int = 10
    # metadata.max.retention.bytes: the log prefix and old snapshots are cleaned above this size
    # (-1: unlimited).
    retention_max_bytes: int = 100 * 1024 * 1024
    # metadata.max.retention.ms: snapshots (and the log before the next one) older than this go
    # (-1: unlimited).
    retention_max_ms: int = 7 * 24 * 60 * 60 * 1000
    # Listener name the node advertises for itself when it has no other endpoints.
    controller_listener_name: str = "CONTROLLER"

    def __post_init__(self) -> None:
        # A bad setting is the operator's mistake, not a bug: refuse it with the Kafka key's name.
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise ValueError(message)

        require(self.election_timeout_ms > 0, "controller.quorum.election.timeout.ms must be positive")
        require(self.fetch_timeout_ms > 0, "controller.quorum.fetch.timeout.ms must be positive")
        require(self.election_backoff_max_ms > 0, "controller.quorum.election.backoff.max.ms must be positive")
        require(self.request_timeout_ms > 0, "controller.quorum.request.timeout.ms must be positive")
        require(self.retry_backoff_ms >= 0, "controller.quorum.retry.backoff.ms must not be negative")
        require(self.append_linger_ms >= 0, "controller.quorum.append.linger.ms must not be negative")
        require(self.fetch_max_bytes > 0, "controller.quorum.fetch.max.bytes must be positive")
        require(self.fetch_snapshot_max_bytes > 0, "controller.quorum.fetch.snapshot.max.bytes must be positive")
