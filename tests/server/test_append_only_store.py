"""The stand-in state machine: committed entries by offset, snapshots that keep those offsets."""

from __future__ import annotations

import pytest

from kraft_engine.raft import BOOTSTRAP_SNAPSHOT_ID, CommittedBatch, SnapshotLoad
from kraft_engine.records.log_batch import OffsetAndEpoch
from kraft_engine.server.append_only_store import AppendOnlyStore
from kraft_engine.server.config import ConfigError, parse_config


def _batch(base_offset: int, values: list[bytes], *, epoch: int = 1) -> CommittedBatch:
    return CommittedBatch(
        base_offset=base_offset,
        last_offset=base_offset + max(len(values), 1) - 1,
        epoch=epoch,
        append_timestamp_ms=1000 + base_offset,
        records=tuple(values),
        control_records=(),
        size_in_bytes=0,
        raw=b"",
    )


def _as_snapshot(request_records: list[bytes], end_offset: int, *, epoch: int = 1) -> SnapshotLoad:
    return SnapshotLoad(
        snapshot_id=OffsetAndEpoch(epoch=epoch, offset=end_offset),
        last_contained_log_timestamp_ms=5,
        batches=(_batch(0, request_records),),
    )


def test_commits_are_kept_at_their_offsets_and_replays_are_ignored() -> None:
    store = AppendOnlyStore(snapshot_interval_bytes=1000)
    store.apply(_batch(3, [b"a", b"b"]))
    store.apply(_batch(3, [b"a", b"b"]))  # delivered again after a restart: already applied
    store.apply(_batch(5, []))  # a control batch consumes an offset, holds no entry
    store.apply(_batch(6, [b"c"]))
    assert store.entries() == [(3, b"a"), (4, b"b"), (6, b"c")]
    assert store.entries(from_offset=4, limit=1) == [(4, b"b")]
    assert store.next_offset == 7


def test_a_snapshot_is_due_after_enough_bytes_and_restores_every_entry_with_its_offset() -> None:
    store = AppendOnlyStore(snapshot_interval_bytes=4)
    store.apply(_batch(0, [b"ab"]))
    assert store.snapshot_due() is None
    store.apply(_batch(1, [b"cd", b"e"]))
    request = store.snapshot_due()
    assert request is not None and request.end_offset == 3
    assert store.snapshot_due() is None  # counted from the snapshot just requested

    restored = AppendOnlyStore(snapshot_interval_bytes=4)
    restored.load_snapshot(_as_snapshot(request.records, request.end_offset))
    assert restored.entries() == store.entries()
    assert restored.next_offset == 3


def test_the_bootstrap_snapshot_holds_no_entries_of_this_store() -> None:
    store = AppendOnlyStore(snapshot_interval_bytes=4)
    store.load_snapshot(
        SnapshotLoad(snapshot_id=BOOTSTRAP_SNAPSHOT_ID, last_contained_log_timestamp_ms=-1,
                     batches=(_batch(0, [b"\x01\x0c\x00metadata.version"]),))
    )
    assert store.entries() == [] and store.next_offset == 0


def test_a_snapshot_record_without_its_offset_is_refused() -> None:
    store = AppendOnlyStore(snapshot_interval_bytes=4)
    with pytest.raises(ValueError, match="without its offset"):
        store.load_snapshot(_as_snapshot([b"abc"], 9))


def test_the_snapshot_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match=r"metadata\.log\.max\.record\.bytes\.between\.snapshots"):
        AppendOnlyStore(snapshot_interval_bytes=0)


def test_the_key_that_enables_the_store_is_a_known_config_key() -> None:
    base = {
        "process.roles": "controller",
        "node.id": "1",
        "listeners": "CONTROLLER://127.0.0.1:9093",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.bootstrap.servers": "127.0.0.1:9093",
    }
    assert parse_config(base).kraftwerk_test_state_machine_enable is False
    enabled = parse_config({**base, "kraftwerk.test.state.machine.enable": "true"})
    assert enabled.kraftwerk_test_state_machine_enable is True
    assert "kraftwerk.test.state.machine.enable" not in enabled.unknown_keys  # no "not used" warning
    with pytest.raises(ConfigError, match=r"Invalid value yes for configuration kraftwerk\.test\.state\.machine\.enable"):
        parse_config({**base, "kraftwerk.test.state.machine.enable": "yes"})
