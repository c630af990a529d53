"""Kafka's replication quota (ReplicationQuotaManager) as a pure object: which replicas are
throttled, how the rate is measured, and that a reader honouring it never moves more than the
bound allows."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kraft_engine.broker.replication_quota import (
    ALL_REPLICAS,
    ReplicationQuota,
    ThrottledReplicasError,
    parse_throttled_replicas,
    throttled_replicas_problem,
)


def test_throttled_replicas_name_the_partitions_of_this_broker() -> None:
    assert parse_throttled_replicas("0:101,1:102,2:101", broker_id=101) == {0, 2}
    assert parse_throttled_replicas(" 0:101 , 1:102 ", broker_id=102) == {1}
    assert parse_throttled_replicas("*", broker_id=7) == {ALL_REPLICAS}
    assert parse_throttled_replicas("", broker_id=7) == frozenset()
    for bad in ("0-101", "a:b", "0:101,", "0:1:2"):
        with pytest.raises(ThrottledReplicasError, match=r"must be the literal '\*'"):
            parse_throttled_replicas(bad, broker_id=1)
        assert throttled_replicas_problem(bad) is not None
    assert throttled_replicas_problem("0:1,3:4") is None


def test_only_marked_replicas_are_throttled_and_only_with_a_bound() -> None:
    quota = ReplicationQuota(window_num=11, window_size_ms=1000)
    quota.mark_throttled("orders", {0, 2})
    assert not quota.is_throttled("orders", 0)  # no rate set: Long.MAX_VALUE throttles nothing
    quota.update_rate(1000)
    assert quota.is_throttled("orders", 0) and quota.is_throttled("orders", 2)
    assert not quota.is_throttled("orders", 1) and not quota.is_throttled("other", 0)
    quota.mark_throttled("other", {ALL_REPLICAS})
    assert quota.is_throttled("other", 41)
    quota.remove_throttle("orders")
    assert not quota.is_throttled("orders", 0)


def test_rate_counts_at_least_window_num_minus_one_windows_then_the_elapsed_time() -> None:
    quota = ReplicationQuota(window_num=11, window_size_ms=1000, rate_bytes_per_s=1000)
    quota.record(5000, now_ms=0)
    assert quota.rate(now_ms=0) == pytest.approx(500)  # 5000 bytes over the minimum 10 s
    assert not quota.is_exceeded(now_ms=0)
    quota.record(6000, now_ms=500)
    assert quota.is_exceeded(now_ms=500)  # 11000 over 10.5 s
    # Samples older than window_num * window_size are forgotten.
    assert quota.rate(now_ms=11_000) == 0
    assert not quota.is_exceeded(now_ms=11_000)


def _honoured_transfer(quota: ReplicationQuota, *, chunks: list[int], step_ms: int) -> list[tuple[int, int]]:
    """A reader that checks before each read and records after, as the fetchers do: (time, total bytes)."""
    now, total, seen = 0, 0, []
    for chunk in chunks:
        while quota.is_exceeded(now_ms=now):
            now += step_ms
        quota.record(chunk, now_ms=now)
        total += chunk
        seen.append((now, total))
        now += 1
    return seen


@settings(max_examples=60, deadline=None)
@given(rate=st.integers(1000, 50_000), window_num=st.integers(2, 11),
       fractions=st.lists(st.floats(0.001, 1.0), min_size=1, max_size=200), step_ms=st.sampled_from([10, 100]))
def test_a_reader_honouring_the_quota_never_moves_more_than_the_bound(
        rate: int, window_num: int, fractions: list[float], step_ms: int) -> None:
    # Each read is at most one window's worth (replica.fetch.max.bytes at most the rate): a read
    # larger than that overshoots every quota window, in Kafka as here.
    chunks = [max(1, int(f * rate)) for f in fractions]
    quota = ReplicationQuota(window_num=window_num, window_size_ms=1000, rate_bytes_per_s=rate)
    for now, total in _honoured_transfer(quota, chunks=chunks, step_ms=step_ms):
        assert total <= _allowed(rate, window_num=window_num, now_ms=now, chunk=max(chunks))


def _allowed(rate: int, *, window_num: int, now_ms: int, chunk: int) -> float:
    """What Kafka's sampled rate lets through by `now_ms`: the rate over the time plus the
    window_num windows of burst, plus one read's overshoot each time the oldest sample expires
    (the measured span then shrinks; every window_num - 1 windows at the fastest)."""
    return rate * (now_ms / 1000 + window_num) + chunk * (1 + now_ms / 1000 / (window_num - 1))


def test_a_quota_that_forgets_its_samples_early_is_caught() -> None:
    """The bound above fails for a broken quota that purges every sample after one window."""

    class Forgetful(ReplicationQuota):
        def _purge(self, now_ms: int) -> None:
            for sample in self._samples:
                if now_ms - sample.start_ms >= self.window_size_ms:
                    sample.start_ms, sample.value = now_ms, 0

    rate, window_num, chunks = 1000, 3, [900] * 200
    quota = Forgetful(window_num=window_num, window_size_ms=1000, rate_bytes_per_s=rate)
    seen = _honoured_transfer(quota, chunks=chunks, step_ms=10)
    assert any(total > _allowed(rate, window_num=window_num, now_ms=now, chunk=max(chunks)) for now, total in seen)
