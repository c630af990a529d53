"""Where new partitions' replicas go: Kafka's StripedReplicaPlacer.

Placement has to spread leaders and followers evenly across racks and brokers without any
global optimisation, and it must never put a new partition's first replica (its leader) on a
fenced broker. Kafka's answer is to stripe: racks are visited round-robin from a rotating
offset, brokers round-robin inside each rack, and each partition starts one rack further on
than the last. This module is that algorithm step for step (including how CreatePartitions
continues after the topic's existing partitions), driven by the controller's injected
`random.Random` instead of Java's, so the same seed gives the same placement here but not the
same one Kafka would pick.

Like Kafka, a fenced broker can still receive a follower replica when a rack has run out of
unfenced ones: that replica simply starts outside the ISR. Brokers in controlled shutdown are
not usable at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from kraft_engine.controller.results import ControllerApiError

if TYPE_CHECKING:
    import random

__all__ = ["StripedReplicaPlacer", "UsableBroker"]


@dataclass(frozen=True, slots=True)
class UsableBroker:
    id: int
    rack: str | None
    fenced: bool


def _invalid_replication_factor(message: str) -> ControllerApiError:
    return ControllerApiError(ErrorCode.invalid_replication_factor, message)


def _check_positive(replication_factor: int) -> None:
    if replication_factor <= 0:
        raise _invalid_replication_factor(
            f"Invalid replication factor {replication_factor}: the replication factor must be positive."
        )


def _check_some_unfenced(num_unfenced: int) -> None:
    if num_unfenced == 0:
        raise _invalid_replication_factor("All brokers are currently fenced.")


def _check_enough_brokers(replication_factor: int, num_total: int) -> None:
    if replication_factor > num_total:
        raise _invalid_replication_factor(
            f"The target replication factor of {replication_factor} cannot be reached because only "
            f"{num_total} broker(s) are registered."
        )


class _BrokerList:
    """Brokers iterated from a rotating offset; each iteration epoch yields each broker once."""

    def __init__(self) -> None:
        self.brokers: list[int] = []
        self._index = 0
        self._offset = 0
        self._epoch = 0

    def initialize(self, rng: random.Random, previous_offset: int | None = None) -> None:
        if self.brokers:
            self.brokers.sort()
            if previous_offset is None:
                self._offset = rng.randrange(len(self.brokers))
            else:
                self._offset = (previous_offset + 1) % len(self.brokers)

    def shuffle(self, rng: random.Random) -> None:
        rng.shuffle(self.brokers)

    def next(self, epoch: int) -> int:
        if not self.brokers:
            return -1
        if self._epoch != epoch:
            self._epoch = epoch
            self._index = 0
            self._offset = (self._offset + 1) % len(self.brokers)
        if self._index >= len(self.brokers):
            return -1
        broker = self.brokers[(self._index + self._offset) % len(self.brokers)]
        self._index += 1
        return broker


class _Rack:
    def __init__(self) -> None:
        self.fenced = _BrokerList()
        self.unfenced = _BrokerList()

    def next_unfenced(self, epoch: int) -> int:
        return self.unfenced.next(epoch)

    def next(self, epoch: int) -> int:
        result = self.unfenced.next(epoch)
        return result if result >= 0 else self.fenced.next(epoch)


def _rack_sort_key(rack: str | None) -> tuple[bool, str]:
    # No rack sorts before every named rack, as Kafka's comparator of Optional<String> does.
    return (rack is not None, rack or "")


class _RackList:
    def __init__(
        self, rng: random.Random, brokers: Iterable[UsableBroker], existing: Sequence[Sequence[int]]
    ) -> None:
        self._rng = rng
        self._racks: dict[str | None, _Rack] = {}
        self.rack_names: list[str | None] = []
        rack_of: dict[int, str | None] = {}
        self.num_total = 0
        self.num_unfenced = 0
        for broker in brokers:
            rack_of[broker.id] = broker.rack
            rack = self._racks.get(broker.rack)
            if rack is None:
                rack = self._racks[broker.rack] = _Rack()
                self.rack_names.append(broker.rack)
            if broker.fenced:
                rack.fenced.brokers.append(broker.id)
            else:
                rack.unfenced.brokers.append(broker.id)
                self.num_unfenced += 1
            self.num_total += 1
        for name, rack in self._racks.items():
            rack.fenced.initialize(rng)
            rack.unfenced.initialize(rng, self._previous_broker_offset(rack_of, existing, name, rack))
        self.rack_names.sort(key=_rack_sort_key)
        previous_rack = self._previous_rack_offset(rack_of, existing)
        if previous_rack is not None:
            self._offset = (previous_rack + 1) % len(self.rack_names)
        else:
            self._offset = rng.randrange(len(self.rack_names)) if self.rack_names else 0
        self._epoch = 0

    def _previous_rack_offset(self, rack_of: dict[int, str | None], existing: Sequence[Sequence[int]]) -> int | None:
        """CreatePartitions continues striping one rack after the last partition's leader."""
        if not existing or not existing[-1]:
            return None
        leader = existing[-1][0]
        if leader not in rack_of:
            return None
        return self.rack_names.index(rack_of[leader])

    @staticmethod
    def _previous_broker_offset(
        rack_of: dict[int, str | None], existing: Sequence[Sequence[int]], rack_name: str | None, rack: _Rack
    ) -> int | None:
        # The most recent existing replica placed in this rack tells where its rotation stopped.
        for replicas in reversed(existing):
            for broker in replicas:
                if broker not in rack_of:
                    continue
                if rack_of[broker] == rack_name:
                    brokers = sorted(rack.unfenced.brokers)
                    return brokers.index(broker) if broker in brokers else None
        return None

    def place(self, replication_factor: int) -> list[int]:
        _check_positive(replication_factor)
        _check_enough_brokers(replication_factor, self.num_total)
        _check_some_unfenced(self.num_unfenced)
        # After as many partitions as there are unfenced brokers, reshuffle so the same
        # assignments do not repeat (never with one unfenced broker: that would loop forever).
        if self._epoch == self.num_unfenced and self.num_unfenced > 1:
            self._shuffle()
            self._epoch = 0
        if self._offset == len(self.rack_names):
            self._offset = 0
        brokers: list[int] = []
        first_rack_index = self._offset
        while True:
            result = self._racks[self.rack_names[first_rack_index]].next_unfenced(self._epoch)
            if result >= 0:
                brokers.append(result)
                break
            first_rack_index = (first_rack_index + 1) % len(self.rack_names)
        rack_index = self._offset
        for _ in range(1, replication_factor):
            result = -1
            while result < 0:
                if rack_index == first_rack_index:
                    # The leader's rack already gave its broker for this round.
                    first_rack_index = -1
                else:
                    result = self._racks[self.rack_names[rack_index]].next(self._epoch)
                rack_index = (rack_index + 1) % len(self.rack_names)
            brokers.append(result)
        self._epoch += 1
        self._offset += 1
        return brokers

    def _shuffle(self) -> None:
        self._rng.shuffle(self.rack_names)
        for rack in self._racks.values():
            rack.fenced.shuffle(self._rng)
            rack.unfenced.shuffle(self._rng)


class StripedReplicaPlacer:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def place(
        self,
        *,
        num_partitions: int,
        replication_factor: int,
        usable_brokers: Iterable[UsableBroker],
        existing_assignments: Sequence[Sequence[int]] = (),
    ) -> list[list[int]]:
        """Replica lists for `num_partitions` new partitions; the first replica of each is
        always an unfenced broker. `existing_assignments` are the topic's current partitions
        (CreatePartitions), so the stripe continues where they left off."""
        racks = _RackList(self._rng, usable_brokers, existing_assignments)
        _check_positive(replication_factor)
        _check_some_unfenced(racks.num_unfenced)
        _check_enough_brokers(replication_factor, racks.num_total)
        return [racks.place(replication_factor) for _ in range(num_partitions)]
