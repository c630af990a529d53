"""Replication throttles: Kafka's ReplicationQuotaManager, pure.

A reassignment copies a partition's whole log to its new replicas. Unthrottled, that copy takes
the disks and the network from the producers and consumers the cluster is serving, so Kafka lets
an operator cap it in bytes per second, on both ends, for the moving replicas only:

- the leader side: `leader.replication.throttled.rate` (a dynamic broker config) caps what the
  leader sends to followers of the partitions its topic config `leader.replication.throttled.replicas`
  names for this broker (`partition:broker,...` or `*`);
- the follower side: `follower.replication.throttled.rate` and `follower.replication.throttled.replicas`;
- log-directory moves: `replica.alter.log.dirs.io.max.bytes.per.second`, for every future replica.

A replica in sync is never throttled (Kafka's shouldLeaderThrottle / shouldFollowerThrottle), so
a throttle set too low slows the move, never the committed traffic.

The rate is measured as Kafka's `Rate` over `SampledStat` windows: `window_num` samples of
`window_size_ms`, each started when the first byte after the previous one's end was recorded,
purged once older than `window_num * window_size_ms`; the measured rate is the bytes in the live
samples over their elapsed time, which counts as at least `window_num - 1` full windows (so a
throttle lets a fresh copy start with up to that many windows' worth at once, as Kafka's does).
The quota is exceeded when that rate is above the bound. Throttled readers check before they read
and record after, so one read can overshoot the bound by its own size, as in Kafka.

Time is an argument (ms); the shell owns the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kraft_engine.errors import BrokerError
from kraft_engine.invariant import require

__all__ = [
    "ALL_REPLICAS",
    "UNLIMITED_RATE",
    "ReplicationQuota",
    "ThrottledReplicasError",
    "parse_throttled_replicas",
    "throttled_replicas_problem",
]

UNLIMITED_RATE = 2**63 - 1
"""Kafka's QuotaConfigs default for the `*.throttled.rate` keys: Long.MAX_VALUE, no throttle."""

ALL_REPLICAS = -1
"""The partition id that stands for every partition of a topic (the config value `*`)."""

_THROTTLED_LIST_FORMAT = ("must be the literal '*' or a list of replicas in the following format: "
                          "[partitionId]:[brokerId],[partitionId]:[brokerId],...")


class ThrottledReplicasError(BrokerError, ValueError):
    """A `*.replication.throttled.replicas` value that is neither `*` nor `partition:broker,...`."""


def parse_throttled_replicas(value: str, *, broker_id: int) -> frozenset[int]:
    """The partitions of a topic throttled on `broker_id` per a `*.replication.throttled.replicas`
    value (Kafka's TopicConfigHandler.parseThrottledPartitions): `{ALL_REPLICAS}` for `*`, the
    partition ids paired with this broker otherwise."""
    text = value.strip()
    if not text:
        return frozenset()
    if text == "*":
        return frozenset({ALL_REPLICAS})
    partitions = set()
    for item in text.split(","):
        fields = item.strip().split(":")
        if len(fields) != 2 or not all(f.strip().isdigit() for f in fields):
            raise ThrottledReplicasError(_THROTTLED_LIST_FORMAT)
        if int(fields[1]) == broker_id:
            partitions.add(int(fields[0]))
    return frozenset(partitions)


def throttled_replicas_problem(value: str) -> str | None:
    """Kafka's ThrottledReplicaListValidator message for a bad value, or None."""
    try:
        parse_throttled_replicas(value, broker_id=-1)
    except ThrottledReplicasError as error:
        return str(error)
    return None


@dataclass(slots=True)
class _Sample:
    start_ms: int
    value: int = 0


class ReplicationQuota:
    """One of a broker's replication quotas (leader, follower or alter-log-dirs)."""

    def __init__(self, *, window_num: int, window_size_ms: int, rate_bytes_per_s: int = UNLIMITED_RATE) -> None:
        require(window_num >= 1 and window_size_ms >= 1, "a replication quota needs at least one window of 1 ms")
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        self.rate_bytes_per_s = rate_bytes_per_s
        self._samples: list[_Sample] = []
        self._current = 0
        self._throttled: dict[str, frozenset[int]] = {}

    # -- which replicas --------------------------------------------------------------------------
    def mark_throttled(self, topic: str, partitions: Iterable[int]) -> None:
        found = frozenset(partitions)
        if found:
            self._throttled[topic] = found
        else:
            self._throttled.pop(topic, None)

    def remove_throttle(self, topic: str) -> None:
        self._throttled.pop(topic, None)

    def throttled_topics(self) -> dict[str, frozenset[int]]:
        return dict(self._throttled)

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Whether this replica of `topic`-`partition` is one the throttle applies to (and a bound is set)."""
        if self.rate_bytes_per_s >= UNLIMITED_RATE:
            return False
        found = self._throttled.get(topic)
        return found is not None and (ALL_REPLICAS in found or partition in found)

    # -- the rate --------------------------------------------------------------------------------
    def update_rate(self, rate_bytes_per_s: int) -> None:
        """A new bound; the measured samples are kept, as Kafka keeps the sensor's."""
        require(rate_bytes_per_s >= 0, "a replication throttle rate is never negative")
        self.rate_bytes_per_s = rate_bytes_per_s

    def record(self, size_bytes: int, *, now_ms: int) -> None:
        if size_bytes <= 0:
            return
        sample = self._current_sample(now_ms)
        if now_ms >= sample.start_ms + self.window_size_ms:
            sample = self._advance(now_ms)
        sample.value += size_bytes

    def rate(self, *, now_ms: int) -> float:
        """Bytes per second over the live samples (Kafka's Rate.measure)."""
        self._purge(now_ms)
        if not self._samples:
            return 0.0
        total = sum(s.value for s in self._samples)
        oldest = min(s.start_ms for s in self._samples)
        elapsed_ms = now_ms - oldest
        full_windows = elapsed_ms // self.window_size_ms
        if full_windows < self.window_num - 1:
            elapsed_ms += (self.window_num - 1 - full_windows) * self.window_size_ms
        return total * 1000.0 / max(elapsed_ms, 1)

    def is_exceeded(self, *, now_ms: int) -> bool:
        if self.rate_bytes_per_s >= UNLIMITED_RATE:
            return False
        return self.rate(now_ms=now_ms) > self.rate_bytes_per_s

    def _current_sample(self, now_ms: int) -> _Sample:
        if not self._samples:
            self._samples.append(_Sample(start_ms=now_ms))
            self._current = 0
        return self._samples[self._current]

    def _advance(self, now_ms: int) -> _Sample:
        self._current = (self._current + 1) % self.window_num
        if self._current >= len(self._samples):
            self._samples.append(_Sample(start_ms=now_ms))
        else:
            self._samples[self._current] = _Sample(start_ms=now_ms)
        return self._samples[self._current]

    def _purge(self, now_ms: int) -> None:
        expire_ms = self.window_num * self.window_size_ms
        for sample in self._samples:
            if now_ms - sample.start_ms >= expire_ms:
                sample.start_ms = now_ms
                sample.value = 0
