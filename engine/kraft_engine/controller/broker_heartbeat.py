"""Broker liveness: soft state the active controller keeps off the metadata log.

Heartbeats are not written to the log (that would flood it), so the last-contact time and
the last metadata offset each broker reported live only in the active controller's memory and
are rebuilt from fresh heartbeats after a failover. Contact times sit in their own tracker,
which the shell updates the moment a heartbeat arrives — before the heartbeat is queued behind
other controller work — so a busy controller never fences a broker for its own slowness.

The manager turns a heartbeat's wishes (want fence / want shut down) and reported offset into
the next broker state, following Kafka's BrokerHeartbeatManager.calculateNextBrokerState:
a FENCED broker is unfenced once it has caught up to its registration record; an UNFENCED
broker that wants to stop goes straight to SHUTDOWN_NOW if it leads nothing, else to
CONTROLLED_SHUTDOWN, which ends once it leads nothing and every active broker has seen the
records that moved its leaderships away.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kraft_engine.invariant import require

__all__ = ["BrokerControlState", "BrokerHeartbeatManager", "BrokerHeartbeatTracker"]


class BrokerControlState(enum.Enum):
    FENCED = "fenced"
    UNFENCED = "unfenced"
    CONTROLLED_SHUTDOWN = "controlled_shutdown"
    SHUTDOWN_NOW = "shutdown_now"

    @property
    def fenced(self) -> bool:
        return self in (BrokerControlState.FENCED, BrokerControlState.SHUTDOWN_NOW)

    @property
    def in_controlled_shutdown(self) -> bool:
        return self is BrokerControlState.CONTROLLED_SHUTDOWN

    @property
    def should_shut_down(self) -> bool:
        return self is BrokerControlState.SHUTDOWN_NOW


class BrokerHeartbeatTracker:
    """Last contact time per (broker id, broker epoch). Written by the shell as heartbeats
    arrive, read by the controller when it looks for expired sessions.

    Like Kafka's ConcurrentHashMap-backed tracker it takes no lock: a write is one dict store
    (atomic under the interpreter), and expiry removes an entry only if no fresher contact time
    landed after it was read, so a heartbeat racing the expiry check is never lost."""

    def __init__(self, *, session_timeout_ms: int) -> None:
        self.session_timeout_ms = session_timeout_ms
        self._contact_times_ms: dict[tuple[int, int], int] = {}

    def update_contact_time(self, broker_id: int, broker_epoch: int, now_ms: int) -> None:
        self._contact_times_ms[(broker_id, broker_epoch)] = now_ms

    def contact_time_ms(self, broker_id: int, broker_epoch: int) -> int | None:
        return self._contact_times_ms.get((broker_id, broker_epoch))

    def remove(self, broker_id: int) -> None:
        for key in [k for k in list(self._contact_times_ms) if k[0] == broker_id]:
            self._contact_times_ms.pop(key, None)

    def clear(self) -> None:
        self._contact_times_ms.clear()

    def has_valid_session(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        contact = self._contact_times_ms.get((broker_id, broker_epoch))
        return contact is not None and contact + self.session_timeout_ms >= now_ms

    def maybe_remove_expired(self, now_ms: int) -> tuple[int, int] | None:
        """One (broker id, epoch) whose session has expired, forgotten as it is returned."""
        entries = list(self._contact_times_ms.items())  # one atomic copy; writers may run meanwhile
        for key, contact in sorted(entries, key=lambda item: (item[1], item[0])):
            if not (now_ms > contact and contact + self.session_timeout_ms < now_ms):
                return None  # sorted by contact time: nothing later has expired either
            removed = self._contact_times_ms.pop(key, None)
            if removed is None:
                continue  # removed meanwhile (unregistered)
            if removed != contact:
                # A heartbeat landed after the copy: its session is alive; put the fresher time
                # back unless an even newer one arrived since.
                self._contact_times_ms.setdefault(key, removed)
                continue
            return key
        return None

    def next_expiry_ms(self) -> int | None:
        """The earliest time a tracked session expires (`maybe_remove_expired` returns it from
        then on), None when no session is tracked. Contact times only move forward, and new
        ones start at the time they are written, so no session expires before this."""
        earliest = min(self._contact_times_ms.values(), default=None)  # one atomic read
        return None if earliest is None else earliest + self.session_timeout_ms + 1

    def brokers(self) -> list[tuple[int, int]]:
        return list(self._contact_times_ms)


@dataclass(slots=True)
class _BrokerState:
    broker_id: int
    fenced: bool
    metadata_offset: int = -1
    controlled_shutdown_offset: int = -1

    @property
    def shutting_down(self) -> bool:
        return self.controlled_shutdown_offset >= 0


class BrokerHeartbeatManager:
    """Per-broker soft state on the active controller; created on activation, dropped on renounce."""

    def __init__(self, tracker: BrokerHeartbeatTracker) -> None:
        self.tracker = tracker
        self._brokers: dict[int, _BrokerState] = {}

    def register(self, broker_id: int, *, fenced: bool) -> None:
        state = self._brokers.get(broker_id)
        if state is None:
            self._brokers[broker_id] = _BrokerState(broker_id, fenced)
        elif state.fenced != fenced:
            state.fenced = fenced
            if fenced:
                state.controlled_shutdown_offset = -1

    def remove(self, broker_id: int) -> None:
        self._brokers.pop(broker_id, None)
        self.tracker.remove(broker_id)

    def has_valid_session(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        state = self._brokers.get(broker_id)
        if state is None or state.fenced:
            return False
        return self.tracker.has_valid_session(broker_id, broker_epoch, now_ms)

    def touch(self, broker_id: int, *, fenced: bool, metadata_offset: int) -> None:
        state = self._state(broker_id)
        state.metadata_offset = metadata_offset
        state.fenced = fenced
        if fenced:
            # A fenced broker leaves controlled shutdown; its next heartbeat shuts it down.
            state.controlled_shutdown_offset = -1

    def update_controlled_shutdown_offset(self, broker_id: int, offset: int) -> None:
        state = self._state(broker_id)
        require(not state.fenced, "Fenced brokers cannot enter controlled shutdown.")
        if state.controlled_shutdown_offset < 0:
            state.controlled_shutdown_offset = offset

    def is_shutting_down(self, broker_id: int) -> bool:
        state = self._brokers.get(broker_id)
        return state is not None and state.shutting_down

    def lowest_active_offset(self) -> int | None:
        """The lowest metadata offset reported by an unfenced broker not shutting down."""
        offsets = [s.metadata_offset for s in self._brokers.values() if not s.fenced and not s.shutting_down]
        return min(offsets, default=None)

    def current_state(self, broker_id: int) -> BrokerControlState:
        state = self._state(broker_id)
        if state.fenced:
            return BrokerControlState.FENCED
        if state.shutting_down:
            return BrokerControlState.CONTROLLED_SHUTDOWN
        return BrokerControlState.UNFENCED

    def calculate_next_state(
        self,
        broker_id: int,
        *,
        want_fence: bool,
        want_shut_down: bool,
        current_metadata_offset: int,
        registration_offset: int,
        has_leaderships: Callable[[], bool],
    ) -> tuple[BrokerControlState, BrokerControlState]:
        """(current state, next state) for a heartbeat."""
        current = self.current_state(broker_id)
        if current is BrokerControlState.FENCED:
            if want_shut_down:
                return current, BrokerControlState.SHUTDOWN_NOW
            if not want_fence and current_metadata_offset >= registration_offset:
                return current, BrokerControlState.UNFENCED
            return current, BrokerControlState.FENCED
        if current is BrokerControlState.UNFENCED:
            if want_fence:
                return current, BrokerControlState.SHUTDOWN_NOW if want_shut_down else BrokerControlState.FENCED
            if want_shut_down:
                if has_leaderships():
                    return current, BrokerControlState.CONTROLLED_SHUTDOWN
                return current, BrokerControlState.SHUTDOWN_NOW
            return current, BrokerControlState.UNFENCED
        # CONTROLLED_SHUTDOWN
        if has_leaderships():
            return current, BrokerControlState.CONTROLLED_SHUTDOWN
        lowest = self.lowest_active_offset()
        if lowest is None or self._state(broker_id).controlled_shutdown_offset <= lowest:
            return current, BrokerControlState.SHUTDOWN_NOW
        return current, BrokerControlState.CONTROLLED_SHUTDOWN

    def usable_brokers(self, candidates: Iterable[int]) -> list[int]:
        """Brokers placement may use: not shutting down."""
        return [b for b in candidates if not self.is_shutting_down(b)]

    def _state(self, broker_id: int) -> _BrokerState:
        state = self._brokers.get(broker_id)
        if state is None:
            raise RuntimeError(f"Broker {broker_id} is not registered with the heartbeat manager.")
        return state
