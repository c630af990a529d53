"""The broker's lifecycle with the controller quorum (Kafka's BrokerLifecycleManager), as a pure
state machine.

A broker is only trusted with replicas once the controllers know this incarnation and it has read
the metadata the controller had when it registered. This module decides, from the answers it is
given and the time it is told, what the broker sends next:

    STARTING                 BrokerRegistration until accepted (capped exponential backoff with
                             jitter between failures); then heartbeats with want_fence=true
    -> RECOVERY              the controller said is_caught_up: the broker's metadata reached the
                             registration offset. The shell recovers its logs, then calls
                             `set_ready_to_unfence`, and heartbeats ask for want_fence=false
    -> RUNNING               a heartbeat answer said is_fenced=false: serve clients
    -> PENDING_CONTROLLED_SHUTDOWN  `begin_controlled_shutdown` (SIGTERM): the next heartbeat goes
                             at once with want_shut_down=true, and keeps going until ...
    -> SHUTTING_DOWN         ... an answer says should_shut_down (the controller moved every
                             leadership away): the shell flushes and exits.

A heartbeat answered with STALE_BROKER_EPOCH means the controller no longer knows this
registration (it was replaced or unregistered): the broker registers again. NOT_CONTROLLER and
transport failures retry after the backoff. Time is an argument and the jitter comes from the
handed `backoff_ms(attempts)` function, so tests drive every path without a clock.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from kraft_engine.invariant import require

__all__ = [
    "BrokerLifecycle",
    "BrokerState",
    "HeartbeatAnswer",
    "HeartbeatRequest",
    "RegistrationRequest",
]


class BrokerState(enum.IntEnum):
    """Kafka's BrokerState values (the BrokerState metric reports these numbers)."""

    NOT_RUNNING = 0
    STARTING = 1
    RECOVERY = 2
    RUNNING = 3
    PENDING_CONTROLLED_SHUTDOWN = 6
    SHUTTING_DOWN = 7


@dataclass(frozen=True, slots=True)
class RegistrationRequest:
    incarnation_id: uuid.UUID
    previous_broker_epoch: int


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    broker_epoch: int
    current_metadata_offset: int
    want_fence: bool
    want_shut_down: bool


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    is_caught_up: bool
    is_fenced: bool
    should_shut_down: bool


class BrokerLifecycle:
    """One broker incarnation's registration and heartbeat schedule."""

    def __init__(
        self,
        *,
        incarnation_id: uuid.UUID,
        heartbeat_interval_ms: int,
        backoff_ms: Callable[[int], int],
        now_ms: int,
        previous_broker_epoch: int = -1,
    ) -> None:
        self.incarnation_id = incarnation_id
        self.state = BrokerState.STARTING
        self.broker_epoch = -1
        self.caught_up = False
        self.ready_to_unfence = False
        self._previous_broker_epoch = previous_broker_epoch
        self._heartbeat_interval_ms = heartbeat_interval_ms
        self._backoff_ms = backoff_ms
        self._failures = 0
        self._next_send_ms = now_ms
        self._in_flight = False
        self._send_again = False  # something to tell the controller came up while a request was in flight

    # -- what to send ------------------------------------------------------------------------------
    @property
    def registered(self) -> bool:
        return self.broker_epoch >= 0

    def next_send_ms(self) -> int | None:
        """When the next request is due; None while one is in flight or after SHUTTING_DOWN."""
        if self._in_flight or self.state is BrokerState.SHUTTING_DOWN:
            return None
        return self._next_send_ms

    def poll(self, *, now_ms: int, metadata_offset: int) -> RegistrationRequest | HeartbeatRequest | None:
        """The request to send now, if one is due (the caller sends it and reports the outcome)."""
        due = self.next_send_ms()
        if due is None or now_ms < due:
            return None
        self._in_flight = True
        if not self.registered:
            return RegistrationRequest(self.incarnation_id, self._previous_broker_epoch)
        return HeartbeatRequest(
            broker_epoch=self.broker_epoch,
            current_metadata_offset=metadata_offset,
            want_fence=not self.ready_to_unfence,
            want_shut_down=self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN,
        )

    # -- what came back ------------------------------------------------------------------------------
    def registration_succeeded(self, *, broker_epoch: int, now_ms: int) -> None:
        self._require_in_flight()
        self.broker_epoch = broker_epoch
        self._failures = 0
        self._next_send_ms = now_ms  # the first heartbeat goes at once

    def heartbeat_succeeded(self, answer: HeartbeatAnswer, *, now_ms: int) -> None:
        self._require_in_flight()
        self._failures = 0
        self._next_send_ms = now_ms if self._send_again else now_ms + self._heartbeat_interval_ms
        self._send_again = False
        if answer.is_caught_up:
            self.caught_up = True
        if self.state is BrokerState.PENDING_CONTROLLED_SHUTDOWN:
            if answer.should_shut_down:
                self.state = BrokerState.SHUTTING_DOWN
            return
        if self.state is BrokerState.STARTING and self.caught_up:
            self.state = BrokerState.RECOVERY
        if self.state is BrokerState.RECOVERY and self.ready_to_unfence and not answer.is_fenced:
            self.state = BrokerState.RUNNING

    def stale_epoch(self, *, now_ms: int) -> None:
        """The controller no longer knows this registration: register again."""
        self._require_in_flight()
        self.broker_epoch = -1
        self._next_send_ms = now_ms

    def failed(self, *, now_ms: int) -> None:
        """The request failed (transport, NOT_CONTROLLER, a refusal): retry after the backoff."""
        self._require_in_flight()
        self._next_send_ms = now_ms + self._backoff_ms(self._failures)
        self._send_again = False  # the retry carries the news
        self._failures += 1

    # -- what the broker decides --------------------------------------------------------------------
    def set_ready_to_unfence(self, *, now_ms: int) -> None:
        """Logs are recovered and publishers installed: ask the controller to unfence us."""
        if not self.ready_to_unfence:
            self.ready_to_unfence = True
            if not self._in_flight:
                self._next_send_ms = min(self._next_send_ms, now_ms)

    def heartbeat_at_once(self, *, now_ms: int) -> None:
        """Something the controller must learn now (a log directory went offline): the next
        heartbeat goes at once, or right after the one in flight, whose request may predate it
        (Kafka's BrokerLifecycleManager.propagateDirectoryFailure)."""
        if not self.registered:
            return  # the registration itself is next; its first heartbeat follows at once
        if self._in_flight:
            self._send_again = True
        else:
            self._next_send_ms = min(self._next_send_ms, now_ms)

    def begin_controlled_shutdown(self, *, now_ms: int) -> None:
        """SIGTERM: ask for a controlled shutdown in the very next heartbeat."""
        if self.state in (BrokerState.PENDING_CONTROLLED_SHUTDOWN, BrokerState.SHUTTING_DOWN):
            return
        if not self.registered:
            # Nothing to hand over: the controller never gave this incarnation anything to lead.
            self.state = BrokerState.SHUTTING_DOWN
            return
        self.state = BrokerState.PENDING_CONTROLLED_SHUTDOWN
        if not self._in_flight:
            self._next_send_ms = now_ms

    def _require_in_flight(self) -> None:
        require(self._in_flight, "an answer arrived for a request that is not in flight")
        self._in_flight = False
