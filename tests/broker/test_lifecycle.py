"""The broker lifecycle: register, heartbeat fenced, catch up, unfence, controlled shutdown."""

from __future__ import annotations

import uuid

import pytest

from kraft_engine.broker import (
    BrokerLifecycle,
    BrokerState,
    HeartbeatAnswer,
    HeartbeatRequest,
    RegistrationRequest,
)
from kraft_engine.invariant import InvariantViolation

INCARNATION = uuid.UUID(int=7)


def lifecycle(**kwargs: object) -> BrokerLifecycle:
    return BrokerLifecycle(
        incarnation_id=INCARNATION,
        heartbeat_interval_ms=2000,
        backoff_ms=lambda attempts: 100 * 2**attempts,
        now_ms=0,
        **kwargs,  # type: ignore[arg-type]
    )


def answer(*, caught_up: bool = False, fenced: bool = True, shut_down: bool = False) -> HeartbeatAnswer:
    return HeartbeatAnswer(is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down)


def test_registration_then_fenced_heartbeats_then_recovery_then_running() -> None:
    lc = lifecycle()
    assert lc.state is BrokerState.STARTING
    assert lc.poll(now_ms=0, metadata_offset=5) == RegistrationRequest(INCARNATION, -1)
    assert lc.poll(now_ms=0, metadata_offset=5) is None  # one request at a time
    lc.registration_succeeded(broker_epoch=42, now_ms=10)
    assert lc.poll(now_ms=10, metadata_offset=5) == HeartbeatRequest(42, 5, want_fence=True, want_shut_down=False)
    lc.heartbeat_succeeded(answer(caught_up=False), now_ms=20)
    assert lc.state is BrokerState.STARTING
    assert lc.poll(now_ms=2019, metadata_offset=9) is None
    assert lc.poll(now_ms=2020, metadata_offset=9) == HeartbeatRequest(42, 9, want_fence=True, want_shut_down=False)
    lc.heartbeat_succeeded(answer(caught_up=True), now_ms=2030)
    assert lc.state is BrokerState.RECOVERY
    # Recovery done: the next heartbeat goes at once and asks to be unfenced.
    lc.set_ready_to_unfence(now_ms=2040)
    assert lc.poll(now_ms=2040, metadata_offset=9) == HeartbeatRequest(42, 9, want_fence=False, want_shut_down=False)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=True), now_ms=2050)
    assert lc.state is BrokerState.RECOVERY  # the controller has not unfenced us yet
    lc.poll(now_ms=4050, metadata_offset=9)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=False), now_ms=4060)
    assert lc.state is BrokerState.RUNNING


def test_an_unfenced_answer_before_recovery_is_not_running() -> None:
    lc = lifecycle()
    lc.poll(now_ms=0, metadata_offset=0)
    lc.registration_succeeded(broker_epoch=1, now_ms=0)
    lc.poll(now_ms=0, metadata_offset=0)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=False), now_ms=1)
    assert lc.state is BrokerState.RECOVERY


def test_registration_failures_back_off_exponentially_and_reset_on_success() -> None:
    lc = lifecycle()
    waits = []
    now = 0
    for _ in range(4):
        assert isinstance(lc.poll(now_ms=now, metadata_offset=0), RegistrationRequest)
        lc.failed(now_ms=now)
        due = lc.next_send_ms()
        assert due is not None
        waits.append(due - now)
        now = due
    assert waits == [100, 200, 400, 800]
    lc.poll(now_ms=now, metadata_offset=0)
    lc.registration_succeeded(broker_epoch=3, now_ms=now)
    lc.poll(now_ms=now, metadata_offset=0)
    lc.failed(now_ms=now)
    assert lc.next_send_ms() == now + 100


def test_a_stale_epoch_makes_the_broker_register_again() -> None:
    lc = lifecycle()
    lc.poll(now_ms=0, metadata_offset=0)
    lc.registration_succeeded(broker_epoch=3, now_ms=0)
    lc.poll(now_ms=0, metadata_offset=0)
    lc.stale_epoch(now_ms=5)
    assert lc.poll(now_ms=5, metadata_offset=0) == RegistrationRequest(INCARNATION, -1)


def test_controlled_shutdown_is_asked_in_the_next_heartbeat_and_ends_on_should_shut_down() -> None:
    lc = lifecycle()
    lc.poll(now_ms=0, metadata_offset=0)
    lc.registration_succeeded(broker_epoch=3, now_ms=0)
    lc.poll(now_ms=0, metadata_offset=0)
    lc.heartbeat_succeeded(answer(caught_up=True), now_ms=0)
    lc.set_ready_to_unfence(now_ms=0)
    lc.poll(now_ms=0, metadata_offset=0)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=False), now_ms=0)
    assert lc.state is BrokerState.RUNNING
    lc.begin_controlled_shutdown(now_ms=100)  # SIGTERM well before the next heartbeat is due
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    assert lc.poll(now_ms=100, metadata_offset=7) == HeartbeatRequest(3, 7, want_fence=False, want_shut_down=True)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=False, shut_down=False), now_ms=110)
    assert lc.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN
    lc.poll(now_ms=2110, metadata_offset=7)
    lc.heartbeat_succeeded(answer(caught_up=True, fenced=True, shut_down=True), now_ms=2120)
    assert lc.state is BrokerState.SHUTTING_DOWN
    assert lc.next_send_ms() is None


def test_shutdown_before_registration_has_nothing_to_hand_over() -> None:
    lc = lifecycle()
    lc.begin_controlled_shutdown(now_ms=0)
    assert lc.state is BrokerState.SHUTTING_DOWN


def test_an_answer_without_a_request_is_a_bug() -> None:
    with pytest.raises(InvariantViolation):
        lifecycle().heartbeat_succeeded(answer(), now_ms=0)


def test_an_offline_directory_is_reported_in_a_heartbeat_at_once_not_at_the_next_interval() -> None:
    lc = lifecycle()
    lc.poll(now_ms=0, metadata_offset=0)
    lc.registration_succeeded(broker_epoch=42, now_ms=0)
    lc.poll(now_ms=0, metadata_offset=0)
    lc.heartbeat_succeeded(answer(caught_up=True), now_ms=10)
    assert lc.poll(now_ms=500, metadata_offset=0) is None  # the regular one is due at 2010
    lc.heartbeat_at_once(now_ms=500)
    assert lc.poll(now_ms=500, metadata_offset=0) == HeartbeatRequest(42, 0, want_fence=True, want_shut_down=False)
    # A failure while a heartbeat is in flight: that request may have been built before it, so
    # another goes as soon as the answer is in.
    lc.heartbeat_at_once(now_ms=510)
    lc.heartbeat_succeeded(answer(caught_up=True), now_ms=520)
    assert lc.next_send_ms() == 520
    lc.poll(now_ms=520, metadata_offset=0)
    lc.heartbeat_succeeded(answer(caught_up=True), now_ms=530)
    assert lc.next_send_ms() == 2530  # then the regular interval again


def test_an_offline_directory_before_registration_waits_for_the_registration() -> None:
    lc = lifecycle()
    lc.heartbeat_at_once(now_ms=0)
    assert lc.poll(now_ms=0, metadata_offset=0) == RegistrationRequest(INCARNATION, -1)
