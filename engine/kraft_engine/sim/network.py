"""An in-memory network whose misbehaviour is chosen by the run's seed.

Every directed link (source → destination) follows a `LinkRule`: how often a message is lost
(a connection failure the waiting side hears about) or duplicated, how long it takes (a random delay in a range, which is also what reorders
messages), and whether the link is cut. Scenarios change rules mid-run (partition, heal,
isolate a node) without touching the nodes. A cut is checked both when a message is sent and
when it would arrive, so a partition also swallows what was already in flight, as a broken
TCP connection does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from kraft_engine.sim.scheduler import Scheduler

__all__ = ["Envelope", "LinkRule", "Network", "NetworkStats"]


@dataclass(frozen=True)
class LinkRule:
    """How one directed link behaves. The defaults are a healthy, slightly jittery LAN."""

    drop_rate: float = 0.0
    duplicate_rate: float = 0.0
    delay_min_ms: int = 1
    delay_max_ms: int = 5
    cut: bool = False


@dataclass(frozen=True)
class Envelope:
    """One message in flight; `payload` is whatever the driver sends (opaque to the network)."""

    source: int
    destination: int
    payload: Any
    sent_ms: int


@dataclass
class NetworkStats:
    sent: int = 0
    delivered: int = 0
    dropped: int = 0
    duplicated: int = 0


class Network:
    """Routes envelopes through the scheduler, applying per-link rules drawn from its random."""

    def __init__(
        self,
        scheduler: Scheduler,
        *,
        deliver: Callable[[Envelope], None],
        default_rule: LinkRule | None = None,
        lost: Callable[[Envelope], None] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._deliver = deliver
        # Random loss is a broken connection, not a black hole: whoever waits for an answer on
        # it is told (TCP would reset). Cut links, by contrast, swallow messages silently.
        self._lost = lost
        self.default_rule = default_rule or LinkRule()
        self._rules: dict[tuple[int, int], LinkRule] = {}
        self.stats = NetworkStats()

    def rule(self, source: int, destination: int) -> LinkRule:
        return self._rules.get((source, destination), self.default_rule)

    def set_rule(self, source: int, destination: int, rule: LinkRule) -> None:
        self._rules[(source, destination)] = rule

    def set_cut(self, source: int, destination: int, *, cut: bool) -> None:
        self._rules[(source, destination)] = replace(self.rule(source, destination), cut=cut)

    def partition(self, *groups: Iterable[int]) -> None:
        """Cut every link between different groups (both directions); links inside a group stay."""
        sets = [frozenset(g) for g in groups]
        for i, left in enumerate(sets):
            for right in sets[i + 1 :]:
                for a in left:
                    for b in right:
                        self.set_cut(a, b, cut=True)
                        self.set_cut(b, a, cut=True)

    def isolate(self, node_id: int, *, others: Iterable[int]) -> None:
        self.partition([node_id], [o for o in others if o != node_id])

    def heal(self) -> None:
        """Restore every cut link; loss, delay and duplication rules stay as they are."""
        for key, rule in list(self._rules.items()):
            if rule.cut:
                self._rules[key] = replace(rule, cut=False)

    def send(self, source: int, destination: int, payload: Any) -> None:
        self.stats.sent += 1
        rule = self.rule(source, destination)
        rand = self._scheduler.random
        if rule.cut:
            self.stats.dropped += 1
            return
        if rule.drop_rate > 0 and rand.random() < rule.drop_rate:
            self.stats.dropped += 1
            if self._lost is not None:
                self._lost(Envelope(source, destination, payload, self._scheduler.now_ms))
            return
        copies = 2 if rule.duplicate_rate > 0 and rand.random() < rule.duplicate_rate else 1
        if copies == 2:
            self.stats.duplicated += 1
        envelope = Envelope(source, destination, payload, self._scheduler.now_ms)
        for _ in range(copies):
            delay_ms = rand.randint(rule.delay_min_ms, max(rule.delay_min_ms, rule.delay_max_ms))
            self._scheduler.call_later(
                delay_ms,
                lambda: self._arrive(envelope),
                label=f"deliver {source}->{destination}",
            )

    def _arrive(self, envelope: Envelope) -> None:
        if self.rule(envelope.source, envelope.destination).cut:
            self.stats.dropped += 1
            return
        self.stats.delivered += 1
        self._deliver(envelope)
