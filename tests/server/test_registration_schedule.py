"""ControllerRegistration backs off: a node that cannot catch up adds a handful of registration
records over a minute, not one per retry; failures back off exponentially with jitter, capped.

The minute is driven through the schedule the node's registration loop uses, with the facts a
real node would see (its image offset, the high watermark and when it learned it), stepping the
clock by the loop's 100 ms poll. The old loop (re-send every 0.2 s while the image lacks the
registration) is run through the same minute to show the count would catch it.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.server.registration_schedule import REGISTRATION_BACKOFF, RegistrationSchedule

MINUTE_MS = 60_000
POLL_MS = 100  # the registration loop's poll


class _OldLoop:
    """The loop this replaced: sleep 0.2 s after every attempt, send while the image lacks us."""

    def __init__(self) -> None:
        self._next_ms = 0
        self.sent_count = 0

    def due(self, *, now_ms: int, registered: bool | None, image_offset: int,
            high_watermark_after_ms: tuple[int, int] | None) -> bool:
        return registered is False and now_ms >= self._next_ms

    def sent(self) -> None:
        self.sent_count += 1

    def accepted(self, *, now_ms: int) -> None:
        self._next_ms = now_ms + 200

    def failed(self, *, now_ms: int) -> None:
        self._next_ms = now_ms + 200


def _records_in_a_minute_behind(schedule: RegistrationSchedule | _OldLoop) -> int:
    """The active controller accepts every registration (one record each, committed at once); this
    node keeps fetching (it learns the high watermark) but its image is stuck at offset 100."""
    leader_hwm = 500
    records = 0
    for now_ms in range(0, MINUTE_MS, POLL_MS):
        if schedule.due(now_ms=now_ms, registered=False, image_offset=100,
                        high_watermark_after_ms=(leader_hwm, now_ms)):
            schedule.sent()
            records += 1
            leader_hwm += 1
            schedule.accepted(now_ms=now_ms + 5)
    return records


def test_a_node_that_cannot_catch_up_adds_a_handful_of_records_in_a_minute() -> None:
    assert _records_in_a_minute_behind(RegistrationSchedule(rng=random.Random(1))) == 1


def test_the_old_loop_would_have_been_caught_by_that_count() -> None:
    # 300 records in a minute: the flood of the issue (87 in 20 s).
    assert _records_in_a_minute_behind(_OldLoop()) > 100


def _attempt_times(schedule: RegistrationSchedule, *, answer: Callable[[int], bool]) -> list[int]:
    times = []
    for now_ms in range(0, MINUTE_MS, POLL_MS):
        if schedule.due(now_ms=now_ms, registered=False, image_offset=0, high_watermark_after_ms=None):
            schedule.sent()
            times.append(now_ms)
            if answer(now_ms):
                schedule.accepted(now_ms=now_ms)
            else:
                schedule.failed(now_ms=now_ms)
    return times


@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_failed_attempts_back_off_exponentially_with_jitter_up_to_the_cap(seed: int) -> None:
    times = _attempt_times(RegistrationSchedule(rng=random.Random(seed)), answer=lambda now_ms: False)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # 100 ms doubling to the 10 s cap, +-20 % jitter, on a 100 ms poll: about a dozen tries a minute.
    assert 8 <= len(times) <= 16, times
    assert gaps[0] <= 200 and max(gaps) <= REGISTRATION_BACKOFF.max_ms + POLL_MS
    assert gaps[-1] >= REGISTRATION_BACKOFF.max_ms * 0.8 - POLL_MS
    # Doubling, with +-20 % jitter on each side: each early gap is at least 2 * 0.8 / 1.2 of the last.
    assert all(later >= earlier * 1.3 - POLL_MS for earlier, later in itertools.pairwise(gaps[:6])), gaps


def test_an_accepted_registration_is_not_sent_again_before_a_high_watermark_covers_it() -> None:
    schedule = RegistrationSchedule(rng=random.Random(2))
    assert schedule.due(now_ms=0, registered=False, image_offset=10, high_watermark_after_ms=(11, 0))
    schedule.sent()
    schedule.accepted(now_ms=50)
    # The high watermark this node knows was learned before the answer: it may not cover the record.
    for now_ms in range(100, 10_000, POLL_MS):
        assert not schedule.due(now_ms=now_ms, registered=False, image_offset=10, high_watermark_after_ms=(11, 40))
    assert schedule.sent_count == 1


def test_a_record_applied_without_holding_this_incarnation_is_registered_again_after_a_backoff() -> None:
    schedule = RegistrationSchedule(rng=random.Random(3))
    assert schedule.due(now_ms=0, registered=False, image_offset=10, high_watermark_after_ms=(11, 0))
    schedule.sent()
    schedule.accepted(now_ms=10)
    # A Fetch answer after the acceptance says the high watermark is 20: the record is below it.
    assert not schedule.due(now_ms=100, registered=False, image_offset=15, high_watermark_after_ms=(20, 60))
    # The image reached offset 19 and does not hold us (another incarnation's record replaced it).
    assert not schedule.due(now_ms=200, registered=False, image_offset=19, high_watermark_after_ms=(20, 60))
    wait_ms = schedule.next_send_ms - 200
    assert 80 <= wait_ms <= 120
    assert schedule.due(now_ms=schedule.next_send_ms, registered=False, image_offset=19,
                        high_watermark_after_ms=(20, 60))


def test_a_registered_node_sends_nothing_and_nothing_while_registration_is_impossible() -> None:
    schedule = RegistrationSchedule(rng=random.Random(4))
    for now_ms in range(0, MINUTE_MS, POLL_MS):
        assert not schedule.due(now_ms=now_ms, registered=True, image_offset=5, high_watermark_after_ms=(6, now_ms))
        assert not schedule.due(now_ms=now_ms, registered=None, image_offset=5, high_watermark_after_ms=None)
    assert schedule.sent_count == 0
