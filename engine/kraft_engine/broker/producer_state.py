"""Per-partition state of idempotent producers (Kafka's ProducerStateManager).

Current Java and librdkafka clients turn idempotence on by default: each batch carries the
producer id and epoch the broker handed out (InitProducerId) and a per-partition sequence number.
The partition leader uses them to keep a retried batch from being written twice and to refuse a
gap or a zombie:

- a batch from an older epoch than the partition has seen: INVALID_PRODUCER_EPOCH (fenced);
- a newer epoch must start at sequence 0, else OUT_OF_ORDER_SEQUENCE_NUMBER;
- in the same epoch, a batch equal to one of the last five (same first and last sequence) is a
  duplicate: the broker answers with the offsets it gave the original and writes nothing;
- otherwise its first sequence must follow the last one (wrapping at 2^31-1), else
  OUT_OF_ORDER_SEQUENCE_NUMBER.

The state is rebuilt whenever the log is opened or truncated, and every appended batch (as
leader or as follower) updates it, so a new leader knows what its predecessor accepted. The
rebuild starts from the newest producer snapshot (`storage.producer_snapshots`, Kafka's
`.snapshot` files: each producer's epoch and last batch) and replays the batch headers after it.
A producer restored from a snapshot knows only its last batch, as in Kafka, so a retry of an
older one of its last five is refused as out of order rather than answered as a duplicate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kraft_engine.errors import BrokerError

__all__ = ["ActiveProducer", "BatchMetadata", "DuplicateBatch", "ProducerStateError", "ProducerStateTable"]

_INT32_MAX = 2**31 - 1
_CACHED_BATCHES = 5
INVALID_PRODUCER_EPOCH = 47
OUT_OF_ORDER_SEQUENCE_NUMBER = 45


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int
    """The batch's max timestamp (Kafka's ProducerStateEntry.lastTimestamp: what DescribeProducers
    reports, and what producer-id expiration would measure from)."""


class ProducerStateError(BrokerError):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class DuplicateBatch:
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class _ProducerEntry:
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=_CACHED_BATCHES))


def _last_seq(base_sequence: int, last_offset_delta: int) -> int:
    return (base_sequence + last_offset_delta) % (_INT32_MAX + 1)


class ProducerStateTable:
    """Producer id -> epoch and the metadata of its last five batches on one partition."""

    def __init__(self) -> None:
        self._producers: dict[int, _ProducerEntry] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def check(self, *, producer_id: int, epoch: int, base_sequence: int, last_offset_delta: int) -> DuplicateBatch | None:
        """Before a leader append: None to append, a DuplicateBatch to answer without writing,
        or ProducerStateError with Kafka's code."""
        if producer_id < 0:
            return None
        entry = self._producers.get(producer_id)
        if entry is None:
            return None  # unknown producer (new, or its state expired): accept, as Kafka does
        if epoch < entry.epoch:
            raise ProducerStateError(
                INVALID_PRODUCER_EPOCH,
                f"producer {producer_id} epoch {epoch} is older than the current epoch {entry.epoch}",
            )
        if epoch > entry.epoch:
            if base_sequence != 0:
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} started epoch {epoch} at sequence {base_sequence}, expected 0",
                )
            return None
        last_seq = _last_seq(base_sequence, last_offset_delta)
        for batch in entry.batches:
            if batch.first_seq == base_sequence and batch.last_seq == last_seq:
                return DuplicateBatch(batch.first_offset, batch.last_offset)
        if entry.batches:
            expected = (entry.batches[-1].last_seq + 1) % (_INT32_MAX + 1)
            if base_sequence != expected:
                raise ProducerStateError(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {producer_id} sent sequence {base_sequence} in epoch {epoch}, expected {expected}",
                )
        return None

    def update(self, *, producer_id: int, epoch: int, base_sequence: int, first_offset: int, last_offset: int,
               timestamp_ms: int) -> None:
        """Record an appended batch (leader or follower, or while rebuilding from the log)."""
        if producer_id < 0:
            return
        entry = self._producers.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = self._producers[producer_id] = _ProducerEntry(epoch)
        elif epoch < entry.epoch:
            return  # an older epoch's batch read back from the log adds nothing
        entry.batches.append(BatchMetadata(
            first_seq=base_sequence,
            last_seq=_last_seq(base_sequence, last_offset - first_offset),
            first_offset=first_offset,
            last_offset=last_offset,
            timestamp_ms=timestamp_ms,
        ))

    def clear(self) -> None:
        self._producers.clear()

    def active_producers(self) -> list[ActiveProducer]:
        """Every producer this partition remembers, by id (what DescribeProducers reports)."""
        return [
            ActiveProducer(producer_id=producer_id, epoch=entry.epoch,
                           last_sequence=entry.batches[-1].last_seq if entry.batches else -1,
                           last_offset=entry.batches[-1].last_offset if entry.batches else -1,
                           last_timestamp_ms=entry.batches[-1].timestamp_ms if entry.batches else -1)
            for producer_id, entry in sorted(self._producers.items())
        ]

    def last_batches(self) -> list[tuple[int, int, BatchMetadata]]:
        """(producer id, epoch, last batch) of every producer with a batch, for a snapshot."""
        return [(pid, e.epoch, e.batches[-1]) for pid, e in sorted(self._producers.items()) if e.batches]

    def restore(self, *, producer_id: int, epoch: int, batch: BatchMetadata) -> None:
        """A producer as a snapshot recorded it: its epoch and its last batch only."""
        entry = self._producers[producer_id] = _ProducerEntry(epoch)
        entry.batches.append(batch)


@dataclass(frozen=True, slots=True)
class ActiveProducer:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    last_timestamp_ms: int
