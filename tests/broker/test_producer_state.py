"""Idempotent-producer state: duplicates answered with the original offsets, gaps and zombies refused."""

from __future__ import annotations

import pytest

from kraft_engine.broker.producer_state import DuplicateBatch, ProducerStateError, ProducerStateTable

PID = 1000


def appended(table: ProducerStateTable, *, epoch: int, seq: int, count: int, offset: int) -> None:
    assert table.check(producer_id=PID, epoch=epoch, base_sequence=seq, last_offset_delta=count - 1) is None
    table.update(producer_id=PID, epoch=epoch, base_sequence=seq, first_offset=offset, last_offset=offset + count - 1,
                 timestamp_ms=1_700_000_000_000 + offset)


def refused(table: ProducerStateTable, *, epoch: int, seq: int, count: int = 1) -> int:
    with pytest.raises(ProducerStateError) as info:
        table.check(producer_id=PID, epoch=epoch, base_sequence=seq, last_offset_delta=count - 1)
    return info.value.error_code


def test_a_retried_batch_is_a_duplicate_answered_with_its_original_offsets() -> None:
    table = ProducerStateTable()
    appended(table, epoch=0, seq=0, count=3, offset=10)
    appended(table, epoch=0, seq=3, count=2, offset=20)
    assert table.check(producer_id=PID, epoch=0, base_sequence=0, last_offset_delta=2) == DuplicateBatch(10, 12)
    assert table.check(producer_id=PID, epoch=0, base_sequence=3, last_offset_delta=1) == DuplicateBatch(20, 21)


def test_only_the_last_five_batches_are_remembered() -> None:
    table = ProducerStateTable()
    for i in range(6):
        appended(table, epoch=0, seq=i, count=1, offset=i)
    assert table.check(producer_id=PID, epoch=0, base_sequence=1, last_offset_delta=0) == DuplicateBatch(1, 1)
    assert refused(table, epoch=0, seq=0) == 45  # forgotten: now just out of order


def test_a_gap_in_the_sequence_is_out_of_order() -> None:
    table = ProducerStateTable()
    appended(table, epoch=0, seq=0, count=2, offset=0)
    assert refused(table, epoch=0, seq=3) == 45
    appended(table, epoch=0, seq=2, count=1, offset=2)


def test_an_older_epoch_is_fenced_and_a_newer_one_starts_at_zero() -> None:
    table = ProducerStateTable()
    appended(table, epoch=1, seq=0, count=1, offset=0)
    assert refused(table, epoch=0, seq=1) == 47
    assert refused(table, epoch=2, seq=5) == 45
    appended(table, epoch=2, seq=0, count=1, offset=1)
    assert refused(table, epoch=1, seq=1) == 47


def test_the_sequence_wraps_at_int32_max() -> None:
    table = ProducerStateTable()
    appended(table, epoch=0, seq=2**31 - 2, count=2, offset=0)
    appended(table, epoch=0, seq=0, count=1, offset=2)


def test_non_idempotent_batches_and_unknown_producers_are_accepted() -> None:
    table = ProducerStateTable()
    assert table.check(producer_id=-1, epoch=-1, base_sequence=-1, last_offset_delta=0) is None
    assert table.check(producer_id=PID, epoch=3, base_sequence=17, last_offset_delta=0) is None


def test_describe_producers_reports_the_max_timestamp_of_each_producers_last_batch() -> None:
    table = ProducerStateTable()
    appended(table, epoch=0, seq=0, count=3, offset=10)
    appended(table, epoch=0, seq=3, count=2, offset=20)
    table.update(producer_id=PID + 1, epoch=2, base_sequence=0, first_offset=30, last_offset=30, timestamp_ms=5)
    assert [(p.producer_id, p.epoch, p.last_sequence, p.last_offset, p.last_timestamp_ms)
            for p in table.active_producers()] == [(PID, 0, 4, 21, 1_700_000_000_020), (PID + 1, 2, 0, 30, 5)]
    # A duplicate changes nothing, a producer restored from a snapshot keeps its batch's timestamp.
    assert table.check(producer_id=PID, epoch=0, base_sequence=3, last_offset_delta=1) == DuplicateBatch(20, 21)
    restored = ProducerStateTable()
    for producer_id, epoch, batch in table.last_batches():
        restored.restore(producer_id=producer_id, epoch=epoch, batch=batch)
    assert restored.active_producers() == table.active_producers()
