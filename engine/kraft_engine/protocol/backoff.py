"""Exponential backoff with jitter, the shape of Kafka's `ExponentialBackoff`.

Clients reconnecting to a restarted node must not stampede it in lock-step, nor hammer a dead
address. Kafka grows the wait from `reconnect.backoff.ms` by a factor of 2 per consecutive failure,
multiplies it by a random factor in [1 - jitter, 1 + jitter) and caps it at
`reconnect.backoff.max.ms`. The randomness comes from an injected `random.Random`, so tests and
simulations are reproducible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import random

__all__ = ["ExponentialBackoff"]


@dataclass(frozen=True, slots=True)
class ExponentialBackoff:
    initial_ms: int
    max_ms: int
    multiplier: float = 2.0
    jitter: float = 0.2

    def backoff_ms(self, attempts: int, *, rng: random.Random) -> int:
        """The wait after `attempts` consecutive failures (0 for the first retry)."""
        if self.max_ms <= self.initial_ms:
            # Kafka: with no room to grow, the backoff is the initial interval (no jitter).
            return self.initial_ms
        # Kafka caps the exponent where the term reaches the maximum, so a long outage does not
        # overflow the power and the jitter still spreads clients around the cap.
        exp_max = math.log(self.max_ms / max(self.initial_ms, 1)) / math.log(self.multiplier)
        term = self.initial_ms * self.multiplier ** min(attempts, exp_max)
        factor = 1.0 if self.jitter <= 0 else rng.uniform(1 - self.jitter, 1 + self.jitter)
        return min(int(factor * term), self.max_ms)
