"""The lifecycle checker of issue 13's proof: while a scenario runs, no two nodes are down at once
because of the operator, and no partition is under min ISR because of it.

`violations(samples)` is the rule, pure: each `Sample` says which nodes were down, which of them
the test itself took down (`excused`), and every partition's replicas, ISR and min ISR.
- Two nodes down at once, neither excused: a violation (one is what a roll or a scale-down does).
- A partition under min ISR is a violation when a replica the test did not take down left its ISR
  since the sample before (the operator took it there, or deeper). One the test's own replicas
  took there is the test's doing, and stays so while no other replica leaves: a broker the
  operator restarted with the ISR in order, then a test-killed one, is the sim's seed 42 (the
  operator acted within its gates; the fault came after).

`LifecycleChecker` samples a `LiveCluster` in a thread (about once a second) from what the operator
itself reports and does: its status, its event lines, the nodes' processes, and the partitions'
replicas and ISR from the brokers' Metadata through the operator's admin client. A node is down
- while its process is gone or status says it is not Running (a node counts once it has been seen
  up: one being created is not down), and
- from the operator's RestartNode, StopNode or ReplaceVolume event for it until it is seen
  recovered: its process runs, and a status written after the event says Running, and for a
  broker registered and unfenced, for a voter caught up (a node that left status.nodes, as a
  stopped node of a scale-down does, is down no more). A controlled restart's gap without a
  process is too short to sample; the recovery after it is what the operator must wait for.
The test names what it disrupts itself: `hold(ids)` before it kills, stops or keeps nodes down,
`release(ids)` when it lets them go; a released node stays excused until it has been seen disturbed
(down, or out of an ISR, while held or after) and then back (serving, and in the ISR of every
partition it is a replica of, in three samples in a row by the same process: a node kept down
crash-loops, and each of its starts runs for a moment). Each sample is traced as one JSON line in
`checker.jsonl` beside the operator's log (what it was judged on), for a failure to be read.
`LiveCluster.workload` runs one per scenario; `kept_down` and `signal` hold and release for the
test.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kraft_operator.admin import ClusterAdmin

if TYPE_CHECKING:
    from .live_cluster import LiveCluster

__all__ = ["LifecycleChecker", "PartitionSample", "Sample", "violations"]

# A released node is back once seen serving by this many samples in a row, by the same process: a
# crash-looping node runs for a moment at each of its starts, and its status can still carry facts
# from before (a quorum described before the loss).
_BACK_SAMPLES = 3

# The operator's event lines (`<type> <reason> <message>`) of the actions that take a node down.
_DISRUPTIONS = re.compile(r"^\w+\s+(?:RestartNode|StopNode|ReplaceVolume)\s+node (\d+):", re.M)


@dataclass(frozen=True)
class PartitionSample:
    name: str  # topic-partition
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_isr: int


@dataclass(frozen=True)
class Sample:
    at_s: float  # seconds since the checker started
    down: frozenset[int]
    excused: frozenset[int]  # nodes the test itself took down (or is waiting to see back)
    partitions: tuple[PartitionSample, ...] | None  # None: no broker answered this time


def violations(samples: Iterable[Sample]) -> list[str]:
    """The broken promises among `samples` (in time order), one line each."""
    found: list[str] = []
    isr_before: dict[str, tuple[int, ...]] = {}
    for sample in samples:
        ours = sorted(sample.down - sample.excused)
        if len(ours) > 1:
            found.append(f"at {sample.at_s:.1f} s nodes {ours} were down at once, none of them taken down by the test"
                         f" (test: {sorted(sample.excused)})")
        for p in sample.partitions or ():
            before = isr_before.get(p.name)
            isr_before[p.name] = p.isr
            if before is None or len(p.isr) >= p.min_isr:
                continue
            left = [r for r in before if r not in p.isr and r in p.replicas and r not in sample.excused]
            if left:
                found.append(f"at {sample.at_s:.1f} s {p.name} ISR {list(p.isr)} was under min ISR {p.min_isr} "
                             f"(replicas {list(p.replicas)}): {left} left it, not taken down by the test "
                             f"(ISR before {list(before)}, test: {sorted(sample.excused)})")
    return found


class LifecycleChecker:
    """Samples `cluster` every `interval_s` from `start()` to `stop()`; `min_isr` is every topic's
    min.insync.replicas (the process tests give each topic the cluster's 2)."""

    def __init__(self, cluster: LiveCluster, *, min_isr: int = 2, interval_s: float = 1.0) -> None:
        self.cluster, self.min_isr, self.interval_s = cluster, min_isr, interval_s
        self.samples: list[Sample] = []
        self._lock = threading.Lock()
        self._held: set[int] = set()
        self._held_down: set[int] = set()  # held nodes seen disturbed (down, or out of an ISR) meanwhile
        # node -> (seen disturbed since it was held, the pid seen back, samples in a row seen back)
        self._releasing: dict[int, tuple[bool, int | None, int]] = {}
        self._seen_up: set[int] = set()
        self._disrupted: dict[int, int] = {}  # node -> when the status before its disruptive event was written
        self._log_offset = 0
        self.disruptions = 0  # the operator's RestartNode, StopNode and ReplaceVolume events seen
        self.errors: list[str] = []  # samples that raised (a status file read mid-write, ...)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = 0.0

    # -- what the test says it does ------------------------------------------------------------------
    def hold(self, node_ids: Iterable[int]) -> None:
        """The test is about to take these nodes down (kill, stop, keep down)."""
        with self._lock:
            for node_id in node_ids:
                self._held.add(node_id)
                self._releasing.pop(node_id, None)

    def release(self, node_ids: Iterable[int]) -> None:
        """The test lets these nodes go: excused until they are seen back."""
        with self._lock:
            for node_id in node_ids:
                if node_id in self._held:
                    self._held.discard(node_id)
                    self._releasing[node_id] = (node_id in self._held_down, None, 0)
                    self._held_down.discard(node_id)

    # -- the sampling ---------------------------------------------------------------------------------
    def start(self) -> None:
        self._started = time.monotonic()
        self._thread.start()

    def stop(self) -> list[str]:
        """Stop sampling; the violations found (the samples stay in `samples`)."""
        self._stop.set()
        self._thread.join()
        return violations(self.samples)

    def summary(self) -> str:
        with_partitions = [s for s in self.samples if s.partitions is not None]
        most = max((len(s.down - s.excused) for s in self.samples), default=0)
        return (f"{len(self.samples)} samples ({len(with_partitions)} with partitions, {len(self.errors)} failed), "
                f"{self.disruptions} disruptive action(s), at most {most} node(s) down at once not taken down by the test")

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                sample = self._sample()
            except Exception as error:  # kept and reported, the sampling goes on
                self.errors.append(repr(error))
                sample = None
            if sample is not None:
                self.samples.append(sample)
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - began)))

    def _sample(self) -> Sample | None:
        cluster = self.cluster
        # The status first (with when it was written), then the events: an event read now was
        # printed after that status was saved, so only a later status can show its node recovered.
        status_path = cluster.state / cluster.namespace / cluster.name / "status.yaml"
        try:
            written_ns = status_path.stat().st_mtime_ns
        except OSError:
            return None
        status = cluster.status()
        if status is None:
            return None
        with cluster.log.open("rb") as log:
            log.seek(self._log_offset)
            read = log.read()
        self._log_offset += read.rfind(b"\n") + 1  # whole lines only
        complete = read[: read.rfind(b"\n") + 1].decode(errors="replace")
        members = {n["id"]: n for n in status["nodes"]}
        alive = {i for i in members if cluster.live_pid(i) is not None}
        brokers = [i for i in members if "broker" in members[i]["roles"] and i in alive]
        with self._lock:
            excused_now = self._held | set(self._releasing)
        # Brokers the test leaves alone first: a stalled one would only cost the request timeout.
        partitions = self._partitions(sorted(brokers, key=lambda i: (i in excused_now, i)))
        caught_up = {v["id"]: v.get("caughtUp", True) for v in (status.get("quorum") or {}).get("voters", [])}

        def serving(node_id: int) -> bool:
            node = members[node_id]
            if node_id not in alive or node.get("phase") != "Running":
                return False
            if "broker" in node["roles"] and (node.get("registered") is False or node.get("fenced") is True):
                return False
            return caught_up.get(node_id, True)

        with self._lock:
            for node_id in list(self._disrupted):
                if node_id not in members or (self._disrupted[node_id] < written_ns and serving(node_id)):
                    del self._disrupted[node_id]
            for match in _DISRUPTIONS.finditer(complete):
                self._disrupted[int(match.group(1))] = written_ns  # recovered only in a later status
                self.disruptions += 1
            self._seen_up |= {i for i in members if i in alive and members[i].get("phase") == "Running"}
            gone = {i for i in members if i in self._seen_up
                    and (i not in alive or members[i].get("phase") != "Running")}
            down = frozenset(gone | (set(self._disrupted) & set(members)))
            for node_id in self._held:
                if node_id in down or any(node_id in p.replicas and node_id not in p.isr for p in partitions or ()):
                    self._held_down.add(node_id)
            for node_id, (disturbed, pid, streak) in list(self._releasing.items()):
                out_of_isr = any(node_id in p.replicas and node_id not in p.isr for p in partitions or ())
                if node_id in down or out_of_isr or node_id not in alive:
                    self._releasing[node_id] = (True, None, 0)
                elif disturbed and partitions is not None and serving(node_id):
                    now_pid = cluster.live_pid(node_id)
                    seen = streak + 1 if now_pid == pid else 1
                    if seen < _BACK_SAMPLES:
                        self._releasing[node_id] = (True, now_pid, seen)
                    else:
                        del self._releasing[node_id]  # back: from now on it counts as any other node
            excused = frozenset(self._held | set(self._releasing))
            sample = Sample(time.monotonic() - self._started, down, excused, partitions)
            self._trace(sample, alive=alive, phases={i: members[i].get("phase") for i in members},
                        disrupted=sorted(self._disrupted), held=sorted(self._held),
                        releasing={i: list(r) for i, r in self._releasing.items()})
        return sample

    def _trace(self, sample: Sample, **facts: object) -> None:
        """One line per sample in `checker.jsonl` beside the operator's log: what it was judged on."""
        line = {"at_s": round(sample.at_s, 1), "down": sorted(sample.down), "excused": sorted(sample.excused),
                **{k: sorted(v) if isinstance(v, set) else v for k, v in facts.items()},
                "under_min_isr": [p.name for p in sample.partitions or () if len(p.isr) < p.min_isr]}
        with (self.cluster.log.parent / "checker.jsonl").open("a") as out:
            out.write(json.dumps(line) + "\n")

    def _partitions(self, brokers: list[int]) -> tuple[PartitionSample, ...] | None:
        addresses = []
        for broker in brokers:
            try:
                host, port = self.cluster.bootstrap([broker]).rsplit(":", 1)
            except (OSError, KeyError):  # its config is being rewritten: ask the others
                continue
            addresses.append((host, int(port)))

        async def ask() -> tuple[PartitionSample, ...]:
            async with ClusterAdmin(brokers=addresses, timeout_ms=5_000) as admin:
                metadata = await admin.metadata()
            return tuple(PartitionSample(f"{t.name}-{p.partition}", tuple(sorted(p.replicas)), tuple(sorted(p.isr)),
                                         self.min_isr)
                         for t in metadata.topics for p in t.partitions)

        try:
            return asyncio.run(ask()) if addresses else None
        except Exception:  # no broker answered this time: this sample has no partitions
            return None
