"""When a controller sends ControllerRegistration again: after a failure (with backoff), or after
its record committed without reaching this node's image - never merely because the image does
not show it yet.

Every accepted ControllerRegistration is a RegisterControllerRecord in the metadata log. A node
that is behind (slow disk, a big catch-up) does not see its own record for a while; re-sending
on a timer while the image lacks it wrote one record per retry (87 in 20 s in one run). Kafka's
ControllerRegistrationManager sends once, waits for the record, and backs off exponentially
between failed attempts. This schedule does the same, and decides "the record committed but my
image does not hold it" precisely:

- an accepted registration is committed on the leader at some offset R <= the leader's high
  watermark when it answered;
- this node learns a high watermark >= R from the first Fetch answer after that (or at once if it
  leads) - that value is the target;
- only when the image has reached the target and still lacks this incarnation (another record
  replaced it, e.g. a registration from a previous incarnation was applied later) is a new one due.

A node that cannot catch up therefore sends nothing more: its target is never reached. Failures
(transport, NOT_CONTROLLER, a refusal) back off with Kafka's `ExponentialBackoff` (100 ms, x2,
capped, 20 % jitter). Pure: time and the facts are arguments, randomness a handed Random.
"""

from __future__ import annotations

import random

from kraft_engine.protocol.backoff import ExponentialBackoff

__all__ = ["REGISTRATION_BACKOFF", "RegistrationSchedule"]

REGISTRATION_BACKOFF = ExponentialBackoff(initial_ms=100, max_ms=10_000, multiplier=2.0, jitter=0.2)


class RegistrationSchedule:
    """Decides when the next ControllerRegistration may go (see the module docstring)."""

    def __init__(self, *, rng: random.Random, backoff: ExponentialBackoff = REGISTRATION_BACKOFF) -> None:
        self._rng = rng
        self._backoff = backoff
        self._failures = 0
        self._next_send_ms = 0
        self._in_flight = False
        #: After an accepted registration: when it was accepted, and the image offset to wait for.
        self._accepted_ms: int | None = None
        self._target_offset: int | None = None
        self.sent_count = 0

    def due(
        self, *, now_ms: int, registered: bool | None, image_offset: int, high_watermark_after_ms: tuple[int, int] | None
    ) -> bool:
        """Whether to send now.

        `registered`: None while registration is impossible, else whether the image holds this
        incarnation. `image_offset`: the last offset in the image. `high_watermark_after_ms`:
        (high watermark, when this node learned it), the leader's own at `now_ms` if it leads."""
        if registered is None or self._in_flight:
            return False
        if registered:
            self._accepted_ms = self._target_offset = None
            self._failures = 0
            return False
        if self._accepted_ms is not None:
            if self._target_offset is None:
                if high_watermark_after_ms is None or high_watermark_after_ms[1] <= self._accepted_ms:
                    return False  # not yet told a high watermark that covers the record
                self._target_offset = high_watermark_after_ms[0] - 1
            if image_offset < self._target_offset:
                return False  # the record may still be on its way to the image
            # Committed and applied, yet the image does not hold us: register again, backing off.
            self._accepted_ms = self._target_offset = None
            self._next_send_ms = now_ms + self._backoff.backoff_ms(self._failures, rng=self._rng)
            self._failures += 1
        return now_ms >= self._next_send_ms

    def sent(self) -> None:
        self._in_flight = True
        self.sent_count += 1

    def accepted(self, *, now_ms: int) -> None:
        self._in_flight = False
        self._accepted_ms = now_ms

    def failed(self, *, now_ms: int) -> None:
        self._in_flight = False
        self._next_send_ms = now_ms + self._backoff.backoff_ms(self._failures, rng=self._rng)
        self._failures += 1

    @property
    def next_send_ms(self) -> int:
        return self._next_send_ms
