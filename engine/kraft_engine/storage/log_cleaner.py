"""Log compaction (`cleanup.policy=compact`): keep the last record of every key, Kafka's LogCleaner.

A compacted topic is a table: `__consumer_offsets` keeps each group's latest committed offsets,
a changelog keeps each key's latest value. The cleaner rewrites the segments below the active one
and the high watermark so that only the latest record of each key survives, and tombstones (null
values) vanish once `delete.retention.ms` has passed since they were written.

One pass, as Kafka's cleaner does it:

1. The dirty section starts at the partition's first dirty offset (`cleaner-offset-checkpoint`)
   and ends at the last cleanable segment's end. Its key -> latest offset map is built from every
   record there (Kafka hashes keys into a bounded buffer; we keep the keys themselves).
2. Every cleanable segment, the clean ones included, is rewritten: a record stays when it has a
   key and no later record of that key is in the map, and, when a tombstone, when it is younger
   than `delete.retention.ms` by its timestamp. A batch whose records all stay is copied byte for
   byte; a batch with some gone is rebuilt around the survivors (same base offset, last offset
   delta, producer fields and codec, the kept records' bytes unchanged, a new CRC), so offsets
   keep their meaning and a consumer sees gaps; a batch with none left is dropped, unless it is
   the last batch of its producer (kept whole, so idempotent producer state survives a rebuild
   from the log). Control batches stay.
3. Each segment is swapped in atomically (`PartitionLog.replace_segment`) and the first dirty
   offset moves to the end of what was cleaned.

`min.compaction.lag.ms` holds records back from cleaning for that long after they were written
(`compaction_upper_bound`): the cleanable section ends at the first dirty segment holding a batch
younger than that by its max timestamp, as Kafka's LogCleanerManager.cleanableOffsets ends it.
`max.compaction.lag.ms` (KIP-354) bounds how long a record may stay uncompacted: once a dirty
sealed segment's first batch is older than that (`max_compaction_delay_ms` > 0), the log is
cleaned whatever its dirty ratio, and the active segment of a compacted topic rolls after that
long (Kafka's LogConfig.maxSegmentMs) so its records become cleanable.

Deviations from Kafka: segments are not merged into larger groups, the offset map is not bounded,
and the tombstone horizon is the record's own timestamp rather than the batch's delete horizon
(KIP-534).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from crc32c import crc32c

from kraft_engine.records.batches import RECORD_BATCH_OVERHEAD, BatchHeader, read_batch_header
from kraft_engine.records.compression import CODEC_NONE, compress, decompress
from kraft_engine.records.record_fields import RecordFields, read_record_fields
from kraft_engine.storage.partition_log import PartitionLog

__all__ = [
    "CLEANER_OFFSET_CHECKPOINT_FILE_NAME",
    "CleaningResult",
    "clean_log",
    "compaction_upper_bound",
    "dirty_ratio",
    "max_compaction_delay_ms",
]

CLEANER_OFFSET_CHECKPOINT_FILE_NAME = "cleaner-offset-checkpoint"
_LOG_APPEND_TIME_MASK = 0x08
_LENGTH_POSITION = 8
_CRC_POSITION = 17
_ATTRIBUTES_POSITION = 21
_MAX_TIMESTAMP_POSITION = 35
_RECORD_COUNT_POSITION = 57


@dataclass(frozen=True, slots=True)
class CleaningResult:
    first_dirty_offset: int  # where the next pass starts
    segments_rewritten: int
    records_removed: int
    bytes_before: int
    bytes_after: int


def compaction_upper_bound(
    log: PartitionLog, *, first_dirty_offset: int, upper_bound: int, now_ms: int, min_compaction_lag_ms: int
) -> int:
    """Where cleaning must stop (Kafka's firstUncleanableDirtyOffset): `upper_bound` (the high
    watermark), or earlier, the base of the first dirty segment whose largest timestamp is less
    than `min.compaction.lag.ms` before `now_ms`. Clean segments are not looked at; a segment
    without timestamps (-1) is old enough, as in Kafka."""
    if min_compaction_lag_ms < 0:
        raise ValueError(f"min.compaction.lag.ms must be at least 0, got {min_compaction_lag_ms}")
    if min_compaction_lag_ms == 0:
        return upper_bound
    for base, end in log.cleanable_segments(upper_bound=upper_bound):
        if end > first_dirty_offset and log.segment_largest_timestamp_ms(base) > now_ms - min_compaction_lag_ms:
            return min(base, upper_bound)
    return upper_bound


def max_compaction_delay_ms(
    log: PartitionLog, *, first_dirty_offset: int, now_ms: int, max_compaction_lag_ms: int
) -> int:
    """How long past `max.compaction.lag.ms` the oldest dirty record waits (Kafka's
    LogCleanerManager.maxCompactionDelay): the oldest first-batch timestamp of the sealed
    segments from the one holding `first_dirty_offset` on (timestamps of 0 or less ignored),
    measured against `now_ms - max_compaction_lag_ms`; 0 when none is that old. Above 0 the log
    must be cleaned now, whatever its dirty ratio."""
    if max_compaction_lag_ms < 1:
        raise ValueError(f"max.compaction.lag.ms must be at least 1, got {max_compaction_lag_ms}")
    sealed = log.cleanable_segments(upper_bound=log.log_end_offset)
    stamps = [t for t in (log.segment_first_batch_timestamp_ms(base) for base, end in sealed if end > first_dirty_offset)
              if t > 0]
    clean_until_ms = now_ms - max_compaction_lag_ms
    return clean_until_ms - min(stamps) if stamps and min(stamps) < clean_until_ms else 0


def dirty_ratio(log: PartitionLog, *, first_dirty_offset: int, upper_bound: int) -> float:
    """Dirty bytes / cleanable bytes, Kafka's `min.cleanable.dirty.ratio` measure (0 when nothing)."""
    segments = log.cleanable_segments(upper_bound=upper_bound)
    total = sum(log.segment_size_bytes(base) for base, _ in segments)
    dirty = sum(log.segment_size_bytes(base) for base, end in segments if end > first_dirty_offset)
    return dirty / total if total else 0.0


def clean_log(
    log: PartitionLog, *, first_dirty_offset: int, upper_bound: int, now_ms: int, delete_retention_ms: int
) -> CleaningResult | None:
    """One cleaning pass over the segments wholly below `upper_bound`; None when none are."""
    segments = log.cleanable_segments(upper_bound=upper_bound)
    if not segments:
        return None
    latest: dict[bytes, int] = {}
    last_batch_of_producer: dict[int, int] = {}
    for base, end in segments:
        for batch in log.segment_batches(base):
            header = read_batch_header(batch)
            if header.producer_id >= 0:
                last_batch_of_producer[header.producer_id] = header.base_offset
            if end <= first_dirty_offset or header.is_control:
                continue
            for record in _fields(batch, header):
                offset = header.base_offset + record.offset_delta
                if record.key is not None and offset >= first_dirty_offset:
                    latest[record.key] = offset
    keep_batches = set(last_batch_of_producer.values())
    rewritten = removed = before = after = 0
    for base, _ in segments:
        kept: list[bytes] = []
        changed = False
        for batch in log.segment_batches(base):
            before += len(batch)
            header = read_batch_header(batch)
            if header.is_control:
                kept.append(batch)
                continue
            body, fields = _body_and_fields(batch, header)
            survivors = [
                f for f in fields
                if _survives(f, header=header, latest=latest, now_ms=now_ms, delete_retention_ms=delete_retention_ms)
            ]
            if len(survivors) == len(fields):
                kept.append(batch)
                continue
            changed = True
            removed += len(fields) - len(survivors)
            if survivors:
                kept.append(_rebuilt(batch, header, body, survivors))
            elif header.base_offset in keep_batches:
                kept.append(batch)
                removed -= len(fields)
        after += sum(len(b) for b in kept)
        if changed:
            log.replace_segment(base, kept)
            rewritten += 1
    return CleaningResult(segments[-1][1], rewritten, removed, before, after)


def _survives(
    fields: RecordFields, *, header: BatchHeader, latest: dict[bytes, int], now_ms: int, delete_retention_ms: int
) -> bool:
    if fields.key is None:
        return False  # a compacted topic has no use for a record without a key (Kafka drops it too)
    offset = header.base_offset + fields.offset_delta
    if offset < latest.get(fields.key, -1):
        return False
    return not (fields.value_is_null and now_ms - (header.base_timestamp + fields.timestamp_delta_ms) > delete_retention_ms)


def _body_and_fields(batch: bytes, header: BatchHeader) -> tuple[bytes, list[RecordFields]]:
    body = batch[RECORD_BATCH_OVERHEAD:]
    if header.compression_codec != CODEC_NONE:
        body = decompress(header.compression_codec, body)
    return body, read_record_fields(body, count=header.record_count)


def _fields(batch: bytes, header: BatchHeader) -> list[RecordFields]:
    return _body_and_fields(batch, header)[1]


def _rebuilt(batch: bytes, header: BatchHeader, body: bytes, survivors: list[RecordFields]) -> bytes:
    """The batch with only `survivors`: header kept (last offset delta included, so the producer's
    sequence range is unchanged), record count, max timestamp, length and CRC redone."""
    records = compress(header.compression_codec, b"".join(body[f.start : f.end] for f in survivors))
    buffer = bytearray(batch[:RECORD_BATCH_OVERHEAD]) + records
    struct.pack_into(">i", buffer, _LENGTH_POSITION, len(buffer) - 12)
    struct.pack_into(">i", buffer, _RECORD_COUNT_POSITION, len(survivors))
    if not header.attributes & _LOG_APPEND_TIME_MASK:
        newest = max(header.base_timestamp + f.timestamp_delta_ms for f in survivors)
        struct.pack_into(">q", buffer, _MAX_TIMESTAMP_POSITION, newest)
    struct.pack_into(">I", buffer, _CRC_POSITION, crc32c(memoryview(buffer)[_ATTRIBUTES_POSITION:]))
    return bytes(buffer)
