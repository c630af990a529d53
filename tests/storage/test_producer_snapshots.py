"""Producer-state snapshots: Kafka's version-1 layout, the newest intact one at or below an offset."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given
from hypothesis import strategies as st

from kraft_engine.storage.producer_snapshots import (
    ProducerSnapshotEntry,
    decode_snapshot,
    delete_producer_snapshots,
    encode_snapshot,
    latest_producer_snapshot,
    producer_snapshot_offsets,
    write_producer_snapshot,
)

ENTRY = ProducerSnapshotEntry(producer_id=4000, epoch=2, last_sequence=41, last_offset=99, offset_delta=4,
                              timestamp_ms=1_700_000_000_123)


def test_the_layout_is_kafkas_version_1() -> None:
    data = encode_snapshot([ENTRY])
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count, len(data)) == (1, 1, 10 + 46)
    assert crc == crc32c(data[6:])
    assert struct.unpack_from(">qhiqiqiq", data, 10) == (4000, 2, 41, 99, 4, 1_700_000_000_123, -1, -1)


@given(st.lists(st.builds(ProducerSnapshotEntry, st.integers(0, 2**63 - 1), st.integers(0, 32767),
                          st.integers(0, 2**31 - 1), st.integers(0, 2**62), st.integers(0, 2**31 - 1)), max_size=20))
def test_encode_then_decode_is_the_identity(entries: list[ProducerSnapshotEntry]) -> None:
    assert decode_snapshot(encode_snapshot(entries)) == entries


@pytest.mark.parametrize("damage", [lambda d: d[:-1], lambda d: d[:12] + bytes([d[12] ^ 1]) + d[13:],
                                    lambda d: b"\x00\x02" + d[2:], lambda d: b""])
def test_damage_is_refused(damage: object) -> None:
    with pytest.raises(ValueError):
        decode_snapshot(damage(encode_snapshot([ENTRY])))  # type: ignore[operator]


def test_the_newest_intact_snapshot_at_or_below_the_offset_is_used(tmp_path: Path) -> None:
    for offset in (10, 20, 30):
        write_producer_snapshot(tmp_path, offset, [ProducerSnapshotEntry(1, 0, offset, offset, 0)])
    assert latest_producer_snapshot(tmp_path, at_most=25) == (20, [ProducerSnapshotEntry(1, 0, 20, 20, 0)])
    (tmp_path / f"{30:020d}.snapshot").write_bytes(b"torn")
    assert latest_producer_snapshot(tmp_path, at_most=100) == (20, [ProducerSnapshotEntry(1, 0, 20, 20, 0)])
    assert producer_snapshot_offsets(tmp_path) == [10, 20]  # the damaged one is gone
    assert latest_producer_snapshot(tmp_path, at_most=5) is None


def test_snapshots_past_a_cut_and_beyond_the_newest_few_are_deleted(tmp_path: Path) -> None:
    for offset in (10, 20, 30, 40):
        write_producer_snapshot(tmp_path, offset, [])
    delete_producer_snapshots(tmp_path, above=30)
    assert producer_snapshot_offsets(tmp_path) == [10, 20, 30]
    delete_producer_snapshots(tmp_path, keep_newest=2)
    assert producer_snapshot_offsets(tmp_path) == [20, 30]
