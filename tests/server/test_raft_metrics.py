"""Kafka's windowed raft metrics: averages, maxima and rates over the last 60 s, NaN when empty."""

from __future__ import annotations

import math

from kraft_engine.server.raft_metrics import WindowedStat


def test_windowed_stat_forgets_observations_older_than_the_window() -> None:
    now = [0.0]
    stat = WindowedStat(window_s=60, clock=lambda: now[0])
    assert math.isnan(stat.avg()) and math.isnan(stat.max())
    stat.record(10)
    now[0] = 30
    stat.record(30)
    assert stat.avg() == 20 and stat.max() == 30
    assert stat.rate_per_s() == 40 / 60
    now[0] = 75  # the first observation is now older than 60 s
    assert stat.avg() == 30 and stat.max() == 30
    now[0] = 200
    assert math.isnan(stat.avg()) and stat.rate_per_s() == 0
    assert stat.total == 40  # the counter keeps everything


def test_recording_keeps_no_object_per_observation() -> None:
    # The leader records one observation per append (thousands a second, 60 s of them kept):
    # the window holds buckets, not samples.
    import tracemalloc

    now = [0.0]
    stat = WindowedStat(window_s=60, clock=lambda: now[0])
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(50_000):
            now[0] = i / 1000  # 50 s of observations, all inside the window
            stat.record(i % 7)
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - before < 64 * 1024  # 50 buckets; one tuple per observation would be ~3 MB
    assert stat.max() == 6 and stat.total == sum(i % 7 for i in range(50_000))
    assert stat.avg() == stat.total / 50_000
