"""The consumer-group workload every client suite runs, and its checks.

Records are produced with acks=all and idempotence; a group of two consumes them, committing
synchronously after each batch it processed; one member leaves and the other takes its
partitions; a third joins and gets some. A record counts as read once the commit covering it
succeeded (a batch whose commit failed because the group moved on is the next owner's to read,
which is what committed offsets are for). At the end:

- every acknowledged record was read exactly once (a lost committed offset, or two members given
  one partition, shows up as a record read twice),
- in offset order within each partition,
- every member that was in the group while records were there got partitions,
- the committed offsets equal the partitions' end offsets.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

PARTITIONS = 4
PHASE_RECORDS = 120


def value(i: int) -> bytes:
    return f"v-{i}".encode()


@dataclass
class Ledger:
    """What the members read (committed), shared by their threads or tasks."""

    reads: list[tuple[str, int, int, bytes]] = field(default_factory=list)  # (member, partition, offset, value)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def committed(self, member: str, batch: list[tuple[int, int, bytes]]) -> None:
        with self.lock:
            self.reads.extend((member, p, o, v) for p, o, v in batch)

    def count(self) -> int:
        with self.lock:
            return len(self.reads)

    def members_with_reads(self) -> set[str]:
        with self.lock:
            return {m for m, *_ in self.reads}


def check(acked: list[tuple[int, int, bytes]], ledger: Ledger, committed: dict[int, int], ends: dict[int, int]) -> None:
    reads = list(ledger.reads)
    counts = Counter((p, o) for _, p, o, _ in reads)
    twice = sorted(k for k, n in counts.items() if n > 1)
    assert twice == [], f"records read twice: {twice[:10]}"
    stored = {(p, o): v for _, p, o, v in reads}
    lost = [a for a in acked if stored.get((a[0], a[1])) != a[2]]
    assert lost == [], f"acknowledged records not read: {lost[:10]}"
    assert len(stored) == len(acked)
    for partition in range(PARTITIONS):
        offsets = [o for _, p, o, _ in reads if p == partition]
        assert offsets == sorted(offsets), f"partition {partition} read out of order"
    assert committed == ends, f"committed offsets {committed} are not the end offsets {ends}"
