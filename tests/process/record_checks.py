"""The checker every broker workload test ends with: what the client was told was written
(acknowledged records) against what the partitions hold when read back by offset.

Values are `<prefix>-<i>[-<padding>]`: the number gives the order the client sent them in, so
per-partition reordering is visible as well as lost, duplicated and overwritten records.
"""

from __future__ import annotations

CLEAN: dict[str, list[object]] = {"lost": [], "duplicated": [], "reordered": []}


def anomalies(acked: list[tuple[int, int, bytes]], stored: dict[tuple[int, int], bytes]) -> dict[str, list[object]]:
    """Lost (an acknowledged record missing or replaced), duplicated values, reordered per partition."""
    lost = [a for a in acked if stored.get((a[0], a[1])) != a[2]]
    seen: dict[bytes, tuple[int, int]] = {}
    duplicated = []
    for key, value in stored.items():
        if value in seen:
            duplicated.append((value, seen[value], key))
        seen[value] = key
    reordered = []
    by_partition: dict[int, list[tuple[int, int]]] = {}
    for partition, offset, value in acked:
        by_partition.setdefault(partition, []).append((int(value.split(b"-")[1]), offset))
    for partition, pairs in by_partition.items():
        offsets = [offset for _, offset in sorted(pairs)]
        if offsets != sorted(offsets):
            reordered.append(partition)
    return {"lost": lost, "duplicated": duplicated, "reordered": reordered}


def add_read(stored: dict[tuple[int, int], bytes], *, partition: int, offset: int, value: bytes) -> None:
    """Record one consumed record; an offset read twice with two different values is an anomaly
    no later check could see, so it fails at once."""
    key = (partition, offset)
    if key in stored and stored[key] != value:
        raise AssertionError(f"offset {key} holds two values: {stored[key]!r} and {value!r}")
    stored[key] = value
