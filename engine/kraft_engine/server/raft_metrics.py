"""Kafka's raft metrics (`kafka.server:type=raft-metrics`) under Prometheus names.

Operators alert on these names in Kafka (current-leader, high-watermark, commit-latency-avg, ...),
so we export the same quantities with the same meaning. The mapping is mechanical: prefix
`kafka_raft_`, dashes become underscores.

| Kafka raft-metrics            | Prometheus                                   |
|-------------------------------|----------------------------------------------|
| current-leader                | kafka_raft_current_leader (-1: unknown)      |
| current-epoch                 | kafka_raft_current_epoch                     |
| current-vote                  | kafka_raft_current_vote (-1: none)           |
| current-state                 | kafka_raft_current_state{state="leader"} 1   |
| high-watermark                | kafka_raft_high_watermark (-1: unknown)      |
| log-end-offset / -epoch       | kafka_raft_log_end_offset / _log_end_epoch   |
| commit-latency-avg / -max     | kafka_raft_commit_latency_avg / _max (ms)    |
| election-latency-avg / -max   | kafka_raft_election_latency_avg / _max (ms)  |
| append-records-rate           | kafka_raft_append_records_rate (records/s)   |
| fetch-records-rate            | kafka_raft_fetch_records_rate (records/s)    |
| number-unknown-voter-connections | kafka_raft_number_unknown_voter_connections |

Averages, maxima and rates are windowed like Kafka's (two 30 s samples: the last 60 s), and a
window with no observations reports NaN, as Kafka does. Counters of the same events are exported
too (`kafka_raft_append_records_total`, `kafka_raft_fetch_records_total`) because Prometheus users
prefer `rate()` over a pre-computed rate.

Faults, which Kafka reports only in its log (the operator's disk-loss and wrong-cluster runbooks
are raised from these):

| Prometheus                                               | what                                      |
|----------------------------------------------------------|-------------------------------------------|
| kraftwerk_raft_fatal_errors_total{kind="storage"}        | failed writes/fsyncs/renames (then exit)  |
| kraftwerk_raft_fatal_errors_total{kind="unexpected"}     | any other fault of the raft loop (exit)   |
| kraftwerk_log_recovery_truncated_bytes                   | bytes recovery cut from the log at start  |
| kraftwerk_log_recovery_dropped_batches                   | whole batches among them (known intact)   |
| kraftwerk_raft_inconsistent_cluster_id_total{peer,direction} | requests/responses refused: wrong cluster |
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kraft_engine.raft import RaftNode, Role

__all__ = ["RaftMetrics", "WindowedStat"]

_WINDOW_S = 60.0


class WindowedStat:
    """Observations over the last `window_s` seconds: avg, max, and sum per second.

    Kept per bucket of `bucket_s` seconds (count, sum, max), not per observation: the leader
    records one per append, thousands a second, and a window of single samples was a deque of
    hundreds of thousands of tuples that every append grew and trimmed. A bucket is forgotten once
    all of it is older than the window, so an observation counts for up to `bucket_s` longer."""

    def __init__(self, *, window_s: float = _WINDOW_S, bucket_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._window_s = window_s
        self._bucket_s = bucket_s
        self._clock = clock
        # [start, count, sum, max] per bucket, oldest first.
        self._buckets: deque[list[float]] = deque()
        self.total = 0.0

    def record(self, value: float) -> None:
        now = self._clock()
        self.total += value
        buckets = self._buckets
        if buckets:
            current = buckets[-1]
            if now < current[0] + self._bucket_s:
                current[1] += 1
                current[2] += value
                current[3] = max(current[3], value)
                return
        buckets.append([now, 1, value, value])
        self._expire(now)

    def _expire(self, now: float) -> None:
        horizon = now - self._window_s - self._bucket_s
        buckets = self._buckets
        while buckets and buckets[0][0] <= horizon:
            buckets.popleft()

    def avg(self) -> float:
        self._expire(self._clock())
        count = sum(b[1] for b in self._buckets)
        if not count:
            return math.nan
        return sum(b[2] for b in self._buckets) / count

    def max(self) -> float:
        self._expire(self._clock())
        return max((b[3] for b in self._buckets), default=math.nan)

    def rate_per_s(self) -> float:
        self._expire(self._clock())
        return sum(b[2] for b in self._buckets) / self._window_s


class RaftMetrics:
    """Collects the raft metrics of one node on scrape; the driver records latencies and counts."""

    def __init__(self, registry: CollectorRegistry, *, node: Callable[[], RaftNode | None]) -> None:
        self._node = node
        self.commit_latency_ms = WindowedStat()
        self.election_latency_ms = WindowedStat()
        self.append_records = WindowedStat()
        self.fetch_records = WindowedStat()
        self.fatal_errors = Counter(
            "kraftwerk_raft_fatal_errors", "Faults that stopped the raft node (storage: a failed write, fsync or rename).",
            labelnames=["kind"], registry=registry,
        )
        self.log_flushes = Counter(
            "kraftwerk_raft_log_flushes",
            "fsyncs of the metadata log the raft driver ran off its event loop (concurrent requests coalesce).",
            registry=registry,
        )
        self.recovery_truncated_bytes = Gauge(
            "kraftwerk_log_recovery_truncated_bytes",
            "Bytes the metadata log's recovery removed when this process opened it.", registry=registry,
        )
        self.recovery_dropped_batches = Gauge(
            "kraftwerk_log_recovery_dropped_batches",
            "Intact batches among the bytes recovery removed (they followed damage).", registry=registry,
        )
        self.inconsistent_cluster_id = Counter(
            "kraftwerk_raft_inconsistent_cluster_id",
            "Raft requests refused by this node (direction=inbound) or responses refusing this node's requests "
            "(direction=outbound) with INCONSISTENT_CLUSTER_ID, per peer.",
            labelnames=["peer", "direction"], registry=registry,
        )
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        node = self._node()
        if node is None:
            return
        gauges: list[tuple[str, str, float]] = [
            ("current_leader", "The current quorum leader's id; -1 indicates unknown.", _or_minus_one(node.leader_id)),
            ("current_epoch", "The current quorum epoch.", node.epoch),
            (
                "current_vote",
                "The current voted leader's id; -1 indicates not voted for anyone.",
                _or_minus_one(None if node.voted_key is None else node.voted_key.id),
            ),
            ("high_watermark", "The high watermark maintained on this member; -1 if it is unknown.",
             _or_minus_one(node.high_watermark)),
            ("log_end_offset", "The current raft log end offset.", node.log_end_offset),
            ("log_end_epoch", "The current raft log end epoch.", node.log.end_offset().epoch),
            ("commit_latency_avg", "The average time in ms to commit an entry in the raft log.",
             self.commit_latency_ms.avg()),
            ("commit_latency_max", "The maximum time in ms to commit an entry in the raft log.",
             self.commit_latency_ms.max()),
            ("election_latency_avg", "The average time in ms spent on electing a new leader.",
             self.election_latency_ms.avg()),
            ("election_latency_max", "The maximum time in ms spent on electing a new leader.",
             self.election_latency_ms.max()),
            ("append_records_rate", "The average number of records appended per sec by the leader of the raft quorum.",
             self.append_records.rate_per_s()),
            ("fetch_records_rate", "The average number of records fetched from the leader of the raft quorum.",
             self.fetch_records.rate_per_s()),
            ("number_unknown_voter_connections",
             "Number of unknown voters whose connection information is not cached.",
             sum(1 for voter in node.voters if voter.key.id != node.node_id and not voter.endpoints)),
        ]
        for name, help_text, value in gauges:
            family = GaugeMetricFamily(f"kafka_raft_{name}", help_text)
            family.add_metric([], float(value))
            yield family
        state = GaugeMetricFamily("kafka_raft_current_state", "The current state of this member (1 for the current one).",
                                  labels=["state"])
        current = _state_name(node)
        for role in [*(r.value.lower() for r in Role), "observer"]:
            state.add_metric([role], 1.0 if role == current else 0.0)
        yield state
        for name, stat in (("append_records", self.append_records), ("fetch_records", self.fetch_records)):
            counter = CounterMetricFamily(f"kafka_raft_{name}", f"Records counted by {name}_rate, since start.")
            counter.add_metric([], stat.total)
            yield counter


def _or_minus_one(value: int | None) -> float:
    return -1.0 if value is None else float(value)


def _state_name(node: RaftNode) -> str:
    # Kafka reports a follower or unattached replica that is not a voter as "observer".
    if not node.is_voter and node.role in (Role.FOLLOWER, Role.UNATTACHED):
        return "observer"
    return node.role.value.lower()
