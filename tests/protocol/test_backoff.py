"""Reconnect backoff follows Kafka's ExponentialBackoff: grow x2 from reconnect.backoff.ms, jitter
of +-20%, capped at reconnect.backoff.max.ms, reproducible from a seeded random.Random."""

from __future__ import annotations

import random

from kraft_engine.protocol import ExponentialBackoff


def test_backoff_grows_exponentially_within_the_jitter_band():
    backoff = ExponentialBackoff(initial_ms=50, max_ms=1000)
    rng = random.Random(1)
    for attempts, base in enumerate([50, 100, 200, 400, 800]):
        value = backoff.backoff_ms(attempts, rng=rng)
        assert int(base * 0.8) <= value <= int(base * 1.2)


def test_backoff_is_capped_at_the_maximum_however_long_the_outage():
    backoff = ExponentialBackoff(initial_ms=50, max_ms=1000)
    rng = random.Random(2)
    values = [backoff.backoff_ms(attempts, rng=rng) for attempts in range(5, 200)]
    assert max(values) == 1000
    assert min(values) >= 800  # jitter still spreads clients below the cap


def test_same_seed_same_waits_and_different_seeds_spread_out():
    backoff = ExponentialBackoff(initial_ms=50, max_ms=1000)
    first = [backoff.backoff_ms(a, rng=random.Random(3)) for a in range(6)]
    again = [backoff.backoff_ms(a, rng=random.Random(3)) for a in range(6)]
    assert first == again
    spread = {backoff.backoff_ms(2, rng=random.Random(seed)) for seed in range(20)}
    assert len(spread) > 1


def test_no_room_to_grow_means_the_initial_interval():
    backoff = ExponentialBackoff(initial_ms=100, max_ms=100)
    assert [backoff.backoff_ms(a, rng=random.Random(4)) for a in range(3)] == [100, 100, 100]
