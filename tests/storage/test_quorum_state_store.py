"""`quorum-state`: Kafka's exact JSON, clear errors on bad files, and crash safety of every write."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft_engine.kafka_uuid import from_kafka_str
from kraft_engine.storage.quorum_state_store import FileQuorumStateStore, QuorumStateData, QuorumStateError

DIR_ID = from_kafka_str("J8aAPcfLQt2bqs1JT_rMgQ")


def test_missing_file_reads_as_fresh_replica(tmp_path: Path) -> None:
    assert FileQuorumStateStore(tmp_path / "quorum-state").read() is None


def test_writes_kafkas_version_1_json_byte_for_byte(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    store.write(QuorumStateData(leader_epoch=2, voted_id=1, voted_directory_id=DIR_ID))
    assert (tmp_path / "quorum-state").read_bytes() == (
        b'{"leaderId":-1,"leaderEpoch":2,"votedId":1,"votedDirectoryId":"J8aAPcfLQt2bqs1JT_rMgQ","data_version":1}'
    )
    assert store.read() == QuorumStateData(leader_epoch=2, voted_id=1, voted_directory_id=DIR_ID)
    assert not (tmp_path / "quorum-state.tmp").exists()


def test_no_vote_writes_the_zero_uuid_and_reads_back_as_none(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    store.write(QuorumStateData(leader_epoch=7, leader_id=3))
    body = json.loads((tmp_path / "quorum-state").read_text())
    assert body == {
        "leaderId": 3,
        "leaderEpoch": 7,
        "votedId": -1,
        "votedDirectoryId": "AAAAAAAAAAAAAAAAAAAAAA",
        "data_version": 1,
    }
    assert store.read() == QuorumStateData(leader_epoch=7, leader_id=3)


def test_reads_kafkas_version_0_file_with_voters(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(
        '{"clusterId":"","leaderId":1,"leaderEpoch":2,"votedId":-1,"appliedOffset":0,'
        '"currentVoters":[{"voterId":1},{"voterId":2}],"data_version":0}'
    )
    state = FileQuorumStateStore(path).read()
    assert state == QuorumStateData(leader_epoch=2, leader_id=1, current_voters=(1, 2))


def test_version_0_round_trip(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    state = QuorumStateData(leader_epoch=4, voted_id=2, current_voters=(1, 2, 3))
    store.write(state, data_version=0)
    assert json.loads((tmp_path / "quorum-state").read_text())["data_version"] == 0
    assert store.read() == state


def test_version_0_cannot_hold_a_directory_id(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    with pytest.raises(ValueError, match="directory id"):
        store.write(QuorumStateData(leader_epoch=1, voted_id=1, voted_directory_id=DIR_ID), data_version=0)
    assert not (tmp_path / "quorum-state").exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("", "empty"),
        ("{not json", "Expecting"),
        ("[1, 2]", "JSON object"),
        ('{"leaderId":1,"leaderEpoch":2,"votedId":-1}', "data_version"),
        ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"data_version":7}', "data_version 7"),
        ('{"leaderId":"x","leaderEpoch":2,"votedId":-1,"data_version":1}', "leaderId"),
        ('{"leaderId":1,"leaderEpoch":2,"votedId":-1,"votedDirectoryId":"short","data_version":1}', "Uuid"),
    ],
)
def test_malformed_file_is_an_error_naming_the_path(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "quorum-state"
    path.write_text(content)
    with pytest.raises(QuorumStateError) as excinfo:
        FileQuorumStateStore(path).read()
    assert str(path) in str(excinfo.value)
    assert problem in str(excinfo.value)
    assert path.read_text() == content  # a bad file is reported, never replaced


def test_clear_removes_file_and_leftover_tmp(tmp_path: Path) -> None:
    store = FileQuorumStateStore(tmp_path / "quorum-state")
    store.write(QuorumStateData(leader_epoch=1))
    (tmp_path / "quorum-state.tmp").write_text("junk")
    store.clear()
    assert list(tmp_path.iterdir()) == []


class _Crash(BaseException):
    """Stands for the process dying: nothing after it runs, not even cleanup handlers that catch Exception."""


def _crash_at(step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the `step`-th call to an I/O primitive used by a durable write kill the process."""
    calls = {"n": 0}

    def wrap(fn: Callable[..., object]) -> Callable[..., object]:
        def inner(*args: object, **kwargs: object) -> object:
            calls["n"] += 1
            if calls["n"] == step:
                raise _Crash
            return fn(*args, **kwargs)

        return inner

    for name in ("open", "write", "fsync", "replace"):
        monkeypatch.setattr(os, name, wrap(getattr(os, name)))


def test_a_crash_at_any_step_leaves_the_old_or_the_new_state(tmp_path: Path) -> None:
    old = QuorumStateData(leader_epoch=5, voted_id=1, voted_directory_id=DIR_ID)
    new = QuorumStateData(leader_epoch=6, leader_id=2)
    outcomes = set()
    step = 1
    while True:
        path = tmp_path / f"run{step}" / "quorum-state"
        path.parent.mkdir()
        FileQuorumStateStore(path).write(old)
        with pytest.MonkeyPatch.context() as mp:
            _crash_at(step, mp)
            try:
                FileQuorumStateStore(path).write(new)
                finished = True
            except _Crash:
                finished = False
        # A restarted process reads whatever the directory holds, leftovers included.
        state = FileQuorumStateStore(path).read()
        assert state in (old, new), f"crash at step {step} left {state}"
        outcomes.add("new" if state == new else "old")
        if finished:
            break
        step += 1
    # The write has several steps; crashes before the rename keep the old state, after it the new.
    assert step > 4
    assert outcomes == {"old", "new"}


def test_writing_after_a_crash_leftover_tmp_succeeds(tmp_path: Path) -> None:
    path = tmp_path / "quorum-state"
    (tmp_path / "quorum-state.tmp").write_bytes(b'{"leaderId":1,"lead')  # torn leftover
    FileQuorumStateStore(path).write(QuorumStateData(leader_epoch=3))
    assert FileQuorumStateStore(path).read() == QuorumStateData(leader_epoch=3)
