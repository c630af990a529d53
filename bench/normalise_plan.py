"""Metadata record decoding with and without the per-class normalise plan (issue #8).

kio's reader returns None for an all-zero Uuid where Kafka reads Uuid.ZERO_UUID, so every decoded
metadata record is normalised (`records.metadata_registry.normalise_decoded`). It used to walk the
record's dataclass fields and their annotations for every record; since 229f0ad it follows a plan
worked out once per class. The snapshot load and the standby's commit path decode through it.

This decodes the records of a 10k-topic / 100k-partition image (10,000 TopicRecords, 100,000
PartitionRecords v2 with directories) three ways: with today's function, with the one before
229f0ad (read from git history, so it needs the repository), and with no normalising at all (the
floor: kio's reader and the upgrade to the latest version). Prints figures; asserts nothing.

    .venv/bin/python bench/normalise_plan.py
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import time
import types
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args, get_origin

import kraft_engine.records.framing as framing
import kraft_engine.records.metadata_registry as registry
from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.records import PartitionRecord, TopicRecord, decode_metadata_record, encode_metadata_record

_PLAN_COMMIT = "229f0ad"
_MODULE = "engine/kraft_engine/records/metadata_registry.py"


def _normalise_before_the_plan() -> Callable[[Any], Any]:
    source = subprocess.run(
        ["git", "show", f"{_PLAN_COMMIT}^:{_MODULE}"], check=True, capture_output=True, text=True,
        cwd=Path(__file__).resolve().parent,
    ).stdout
    section = source[source.index("# --- Normalising"):source.index("# --- Kafka's JSON")]
    namespace: dict[str, Any] = {"dataclasses": dataclasses, "types": types, "Any": Any, "get_args": get_args,
                                 "get_origin": get_origin, "ZERO_UUID": ZERO_UUID}
    exec(compile(section, f"{_PLAN_COMMIT}^:{_MODULE}", "exec"), namespace)
    normalise: Callable[[Any], Any] = namespace["normalise_decoded"]
    return normalise


def _image_records(topics: int, partitions: int) -> list[bytes]:
    values = []
    for t in range(topics):
        topic_id = uuid.uuid4()
        values.append(encode_metadata_record(TopicRecord(name=f"topic-{t}", topic_id=topic_id), 0))
        for p in range(partitions):
            values.append(encode_metadata_record(PartitionRecord(
                partition_id=p, topic_id=topic_id, replicas=(1, 2, 3), isr=(1, 2, 3), removing_replicas=(),
                adding_replicas=(), leader=1, leader_epoch=0, partition_epoch=0,
                directories=(uuid.uuid4(), uuid.uuid4(), uuid.uuid4()),
            ), 2))
    return values


def _best_of(runs: int, work: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    values = _image_records(10_000, 10)
    before = _normalise_before_the_plan()
    # What kio's reader hands to the normaliser, captured once.
    decoded: list[Any] = []
    framing.normalise_decoded = lambda entity: decoded.append(entity) or entity  # type: ignore[assignment]
    for value in values:
        decode_metadata_record(value)
    print(f"load average {os.getloadavg()[0]:.1f}; {len(values):,} records; best of 3")
    for label, normalise in (("before the plan", before), ("per-class plan", registry.normalise_decoded)):
        alone = _best_of(3, lambda n=normalise: [n(e) for e in decoded])  # type: ignore[misc]
        framing.normalise_decoded = normalise  # type: ignore[assignment]
        total = _best_of(3, lambda: [decode_metadata_record(v) for v in values])
        print(f"{label:>16}: normalising {alone * 1000:8,.0f} ms   whole decode {total * 1000:8,.0f} ms "
              f"({total / len(values) * 1e6:.1f} us/record, {alone / total:.0%} of it normalising)")
    framing.normalise_decoded = lambda entity: entity  # type: ignore[assignment]
    floor = _best_of(3, lambda: [decode_metadata_record(v) for v in values])
    print(f"{'no normalising':>16}: {'':24}whole decode {floor * 1000:8,.0f} ms")


if __name__ == "__main__":
    main()
