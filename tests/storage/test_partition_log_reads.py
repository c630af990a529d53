"""Where a read starts and ends, against a model that walks every batch of every segment file.

`PartitionLog._locate` finds a read's end from the offset index and the batches appended since
its last entry, and walks at most one index interval of headers (it used to read the whole
answer to walk it). These properties hold it to the plain rule, whatever the batch sizes, index
interval, segment size, offset gaps, truncations and reopens: whole batches from the one holding
the offset (or the next one, past a gap), in one segment, up to `max_bytes` but at least one,
none starting at or past `upper_bound`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_engine.records.batches import build_batch, iter_batches
from kraft_engine.storage.partition_log import PartitionLog


def _segments_on_disk(directory: Path) -> list[list[tuple[int, int, int, int]]]:
    """Per segment file, in offset order: (base offset, last offset, position, size) of each batch."""
    segments = []
    for path in sorted(directory.glob("*.log")):
        batches, position = [], 0
        for header, chunk in iter_batches(path.read_bytes()):
            batches.append((header.base_offset, header.last_offset, position, len(chunk)))
            position += len(chunk)
        segments.append((int(path.stem), batches))
    return [batches for _, batches in sorted(segments)]


def _expected(
    segments: list[list[tuple[int, int, int, int]]], *, offset: int, max_bytes: int, upper_bound: int | None
) -> tuple[int, int, int] | None:
    """(segment number, start, size) the plain rule gives, or None for an empty read."""
    for number, batches in enumerate(segments):
        holding = [i for i, (_, last, _, _) in enumerate(batches) if last >= offset]
        if not holding:
            continue
        first = holding[0]
        base, _, start, size = batches[first]
        if upper_bound is not None and base >= upper_bound:
            return None
        end = start + size
        for base, _, position, size in batches[first + 1 :]:
            if end - start + size > max_bytes or (upper_bound is not None and base >= upper_bound):
                break
            end = position + size
        return number, start, end - start
    return None


_BATCHES = st.lists(
    st.tuples(st.integers(1, 4), st.integers(0, 300), st.integers(0, 3)), min_size=1, max_size=40
)
_READS = st.lists(
    st.tuples(st.floats(0, 1), st.integers(1, 8000), st.none() | st.floats(0, 1.1)), min_size=1, max_size=25
)


def _append(log: PartitionLog, *, records: int, value_bytes: int, gap: int) -> None:
    base = log.log_end_offset + gap
    log.append_as_follower(
        build_batch(
            base_offset=base,
            partition_leader_epoch=0,
            values=[os.urandom(value_bytes)] * records,
            timestamp_ms=1_700_000_000_000,
        )
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    index_interval_bytes=st.sampled_from([0, 1, 200, 700, 4096]),
    segment_bytes=st.sampled_from([300, 1500, 6000, 1 << 20]),
    batches=_BATCHES,  # (records, value bytes, offset gap before it) per follower append
    truncate_at=st.none() | st.floats(0, 1),
    reopen=st.sampled_from([None, "clean", "crash"]),
    then=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 200)), max_size=8),
    reads=_READS,  # (where in the log, max bytes, upper bound as a share of the log end)
)
def test_a_read_is_whole_batches_of_one_segment_up_to_max_bytes_and_the_upper_bound(
    tmp_path_factory: pytest.TempPathFactory,
    index_interval_bytes: int,
    segment_bytes: int,
    batches: list[tuple[int, int, int]],
    truncate_at: float | None,
    reopen: str | None,
    then: list[tuple[int, int]],
    reads: list[tuple[float, int, float | None]],
) -> None:
    directory = tmp_path_factory.mktemp("reads") / "t-0"

    def open_log(*, clean_shutdown: bool = False) -> PartitionLog:
        return PartitionLog.open(
            directory,
            segment_bytes=segment_bytes,
            index_interval_bytes=index_interval_bytes,
            allow_offset_gaps=True,
            clean_shutdown=clean_shutdown,
        )[0]

    log = open_log()
    try:
        for records, value_bytes, gap in batches:
            _append(log, records=records, value_bytes=value_bytes, gap=gap)
        if truncate_at is not None:
            log.truncate_to(int(log.log_end_offset * truncate_at))
        if reopen is not None:
            log.close()
            log = open_log(clean_shutdown=reopen == "clean")
        for records, value_bytes in then:
            _append(log, records=records, value_bytes=value_bytes, gap=0)
        segments = _segments_on_disk(directory)
        names = sorted(directory.glob("*.log"))
        for where, max_bytes, bound in reads:
            end = log.log_end_offset
            offset = log.log_start_offset + int((end - log.log_start_offset) * where)
            upper_bound = None if bound is None else int(end * bound)
            expected = (
                None
                if offset == end or (upper_bound is not None and offset >= upper_bound)
                else _expected(segments, offset=offset, max_bytes=max_bytes, upper_bound=upper_bound)
            )
            region = log.read_region(offset, max_bytes=max_bytes, upper_bound=upper_bound)
            data = log.read(offset, max_bytes=max_bytes, upper_bound=upper_bound)
            if expected is None:
                assert (region, data) == (None, b""), (offset, max_bytes, upper_bound)
                continue
            number, start, size = expected
            assert region is not None and region[1:] == (start, size), (
                offset,
                max_bytes,
                upper_bound,
                region,
            )
            assert os.path.samefile(f"/proc/self/fd/{region[0]}", names[number])
            with open(names[number], "rb") as segment:
                segment.seek(start)
                assert data == segment.read(size)
    finally:
        log.close()
