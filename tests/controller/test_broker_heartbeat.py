"""Broker liveness soft state: session expiry and the FENCED/UNFENCED/CONTROLLED_SHUTDOWN machine."""

from __future__ import annotations

from kraft_engine.controller.broker_heartbeat import (
    BrokerControlState,
    BrokerHeartbeatManager,
    BrokerHeartbeatTracker,
)

FENCED = BrokerControlState.FENCED
UNFENCED = BrokerControlState.UNFENCED
CONTROLLED_SHUTDOWN = BrokerControlState.CONTROLLED_SHUTDOWN
SHUTDOWN_NOW = BrokerControlState.SHUTDOWN_NOW


def _next(manager: BrokerHeartbeatManager, broker_id: int, *, offset: int = 100, fence: bool = False,
          shut_down: bool = False, leads: bool = False) -> BrokerControlState:
    _, nxt = manager.calculate_next_state(
        broker_id, want_fence=fence, want_shut_down=shut_down, current_metadata_offset=offset,
        registration_offset=50, has_leaderships=lambda: leads,
    )
    return nxt


def test_sessions_expire_one_broker_at_a_time_after_the_timeout() -> None:
    tracker = BrokerHeartbeatTracker(session_timeout_ms=9000)
    tracker.update_contact_time(1, 10, now_ms=1000)
    tracker.update_contact_time(2, 20, now_ms=2000)
    assert tracker.maybe_remove_expired(now_ms=10000) is None
    assert tracker.has_valid_session(1, 10, now_ms=10000)
    assert tracker.maybe_remove_expired(now_ms=10001) == (1, 10)
    assert tracker.maybe_remove_expired(now_ms=10001) is None
    assert not tracker.has_valid_session(1, 10, now_ms=10001)
    # A contact for another epoch is another session.
    assert not tracker.has_valid_session(2, 21, now_ms=2000)


def test_a_fenced_broker_is_unfenced_only_once_caught_up_and_not_asking_to_stay_fenced() -> None:
    manager = BrokerHeartbeatManager(BrokerHeartbeatTracker(session_timeout_ms=9000))
    manager.register(1, fenced=True)
    assert _next(manager, 1, offset=49) is FENCED
    assert _next(manager, 1, offset=50, fence=True) is FENCED
    assert _next(manager, 1, offset=50) is UNFENCED
    assert _next(manager, 1, shut_down=True) is SHUTDOWN_NOW


def test_shutdown_is_immediate_without_leaderships_and_controlled_with_them() -> None:
    manager = BrokerHeartbeatManager(BrokerHeartbeatTracker(session_timeout_ms=9000))
    manager.register(1, fenced=False)
    manager.register(2, fenced=False)
    manager.touch(1, fenced=False, metadata_offset=100)
    manager.touch(2, fenced=False, metadata_offset=90)
    assert _next(manager, 1, shut_down=True) is SHUTDOWN_NOW
    assert _next(manager, 1, shut_down=True, leads=True) is CONTROLLED_SHUTDOWN
    assert _next(manager, 1, fence=True) is FENCED

    # Leadership moved away by records ending at offset 95: broker 2 has only seen up to 90.
    manager.update_controlled_shutdown_offset(1, 95)
    assert manager.current_state(1) is CONTROLLED_SHUTDOWN
    assert _next(manager, 1, shut_down=True, leads=True) is CONTROLLED_SHUTDOWN
    assert _next(manager, 1, shut_down=True) is CONTROLLED_SHUTDOWN
    manager.touch(2, fenced=False, metadata_offset=95)
    assert _next(manager, 1, shut_down=True) is SHUTDOWN_NOW
    # The shutting-down broker does not hold back the lowest active offset.
    assert manager.lowest_active_offset() == 95
    assert manager.usable_brokers([1, 2]) == [2]
