"""Leader-epoch checkpoint text format and Kafka's end-offset-for-epoch answers."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.invariant import InvariantViolation
from kraft_engine.storage.checkpoint_file import (
    CheckpointError,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
)
from kraft_engine.storage.leader_epoch_cache import LeaderEpochCache


def test_leader_epoch_checkpoint_is_kafkas_text_format(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_leader_epoch_checkpoint(path, [(1, 0), (3, 42)])
    assert path.read_text() == "0\n2\n1 0\n3 42\n"
    assert read_leader_epoch_checkpoint(path) == [(1, 0), (3, 42)]


def test_offset_checkpoint_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offset_checkpoint(path, {("__cluster_metadata", 0): 17, ("a", 2): 5})
    assert path.read_text() == "0\n2\n__cluster_metadata 0 17\na 2 5\n"
    assert read_offset_checkpoint(path) == {("__cluster_metadata", 0): 17, ("a", 2): 5}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "missing version"),
        ("1\n0\n", "Unrecognized version"),
        ("0\nx\n", "count"),
        ("0\n2\n1 0\n", "Expected 2 entries"),
        ("0\n1\n1\n", "Malformed line 3"),
        ("0\n1\nx 0\n", "Malformed entry"),
    ],
)
def test_malformed_checkpoint_is_an_error_naming_the_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    path.write_text(content)
    with pytest.raises(CheckpointError) as excinfo:
        read_leader_epoch_checkpoint(path)
    assert problem in str(excinfo.value) and str(path) in str(excinfo.value)


def _cache(tmp_path: Path, entries: list[tuple[int, int]]) -> LeaderEpochCache:
    cache = LeaderEpochCache(tmp_path / "leader-epoch-checkpoint", [])
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_end_offset_for_epoch_follows_kafka(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 10), (6, 25)])
    leo = 40
    assert cache.end_offset_for(6, log_end_offset=leo) == (6, 40)  # latest epoch: log end
    assert cache.end_offset_for(3, log_end_offset=leo) == (3, 25)  # next higher epoch's start
    assert cache.end_offset_for(4, log_end_offset=leo) == (3, 25)  # unknown epoch: largest below it
    assert cache.end_offset_for(5, log_end_offset=leo) == (3, 25)
    assert cache.end_offset_for(1, log_end_offset=leo) == (1, 10)
    assert cache.end_offset_for(7, log_end_offset=leo) == (-1, -1)  # above every known epoch
    assert cache.end_offset_for(-1, log_end_offset=leo) == (-1, -1)  # undefined
    # Below the first known epoch Kafka answers (requested, start of the first epoch).
    assert cache.end_offset_for(0, log_end_offset=leo) == (0, 0)


def test_end_offset_on_empty_cache_is_undefined(tmp_path: Path) -> None:
    assert _cache(tmp_path, []).end_offset_for(3, log_end_offset=0) == (-1, -1)


def test_assign_persists_and_ignores_repeats(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0)])
    assert not cache.assign(1, 5)
    assert cache.assign(2, 5)
    assert read_leader_epoch_checkpoint(cache.path) == [(1, 0), (2, 5)]
    with pytest.raises(InvariantViolation):
        cache.assign(1, 9)


def test_truncation_from_end_and_start(tmp_path: Path) -> None:
    cache = _cache(tmp_path, [(1, 0), (3, 10), (6, 25)])
    cache.truncate_from_end(25)
    assert cache.entries == [(1, 0), (3, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(3, 12)]
    assert read_leader_epoch_checkpoint(cache.path) == [(3, 12)]
    assert cache.epoch_for_offset(11) is None
    assert cache.epoch_for_offset(30) == 3
