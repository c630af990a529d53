"""The metadata loader: folds committed batches and snapshots into images and publishes them.

It is Kafka's MetadataLoader and MetadataBatchLoader in one pure object. The caller (the node's
driver) feeds it, on one thread, what the raft layer committed: batches of decoded metadata
records with their offsets and epoch, snapshots, leader changes and the high watermark. The loader
calls its publishers synchronously, in install order.

Rules it keeps:
- Many batches committed together become one delta and one publish (`handle_commit`).
- Metadata transactions (KIP-866): records between BeginTransaction and EndTransaction are published
  together; nothing is published mid-transaction; AbortTransaction discards them. A Begin part-way
  through accumulated records first publishes what came before it, so that an abort can return to
  exactly the pre-transaction image (that publish is not batch-aligned if the Begin was mid-batch).
  Unlike Kafka, whose batch loader keeps the aborted records in its delta until the next flush,
  an abort here discards them at once, so records after the abort in the same commit apply cleanly.
- Catch-up gate: publishers see nothing until the loader has reached the high watermark it was told
  (offset >= high watermark - 1) and has applied at least one delta or snapshot. The image itself
  advances regardless.
- A newly installed publisher first gets one delta from the empty image to the current image (with
  a snapshot manifest), then incremental deltas like everyone else.
- A record that cannot be replayed is fatal: `MetadataReplayError` names its offset, and the loader
  refuses further input, because a node that cannot understand committed metadata must not go on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from typing import NoReturn, cast

from kraft_engine.metadata.errors import MetadataReplayError
from kraft_engine.metadata.metadata_delta import MetadataDelta
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.metadata.publishing import (
    LoaderManifest,
    LogDeltaManifest,
    MetadataPublisher,
    SnapshotManifest,
)
from kraft_engine.raft import CommittedBatch, LeaderAndEpoch
from kraft_engine.records.metadata_records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    PartitionChangeRecord,
)
from kraft_engine.records.record_runs import PartitionChangeRun, RecordParts

__all__ = ["MetadataLoader"]


class _TransactionState(enum.Enum):
    NONE = "none"
    STARTED = "started"
    CONTINUED = "continued"
    ENDED = "ended"
    ABORTED = "aborted"


_IN_TRANSACTION = (_TransactionState.STARTED, _TransactionState.CONTINUED)
_TRANSACTION_MARKERS = frozenset({BeginTransactionRecord, EndTransactionRecord, AbortTransactionRecord})

FaultHandler = Callable[[str, BaseException], None]


class MetadataLoader:
    """Single-writer loader. Every method is called from the node's one metadata-loading context."""

    def __init__(self, *, publisher_fault_handler: FaultHandler | None = None) -> None:
        # A publisher that raises is reported here and the others still run (Kafka's behaviour);
        # without a handler the error propagates to the caller.
        self._publisher_fault_handler = publisher_fault_handler
        self._publishers: list[MetadataPublisher] = []
        self._uninitialized: list[MetadataPublisher] = []
        self._leader_and_epoch = LeaderAndEpoch.UNKNOWN
        self._high_watermark: int | None = None
        self._catching_up = True
        self._has_seen_record = False
        self._failure: MetadataReplayError | None = None
        self._reset_to_image(MetadataImage.EMPTY)
        self._has_seen_record = False

    # -- what callers read ------------------------------------------------------------------------

    @property
    def image(self) -> MetadataImage:
        """The newest complete image (never mid-transaction)."""
        return self._image

    @property
    def last_applied_offset(self) -> int:
        return self._image.offset

    @property
    def catching_up(self) -> bool:
        return self._catching_up

    @property
    def publisher_names(self) -> list[str]:
        return [p.name for p in self._publishers]

    # -- inputs ------------------------------------------------------------------------------------

    def handle_commit(
        self, batches: Iterable[CommittedBatch[object]], *, high_watermark: int | None = None, elapsed_ns: int = 0
    ) -> None:
        """Fold committed batches (in offset order) into one delta and publish it."""
        self._check_usable()
        if high_watermark is not None:
            self._high_watermark = high_watermark
        for batch in batches:
            self._load_batch(batch)
        self._elapsed_ns += elapsed_ns
        self._maybe_flush()
        # A new high watermark alone may open the catch-up gate for waiting publishers.
        self._initialize_new_publishers(elapsed_ns=0)

    def handle_load_snapshot(
        self,
        records: Iterable[object],
        *,
        last_contained_offset: int,
        last_contained_epoch: int,
        last_contained_log_time_ms: int,
        elapsed_ns: int = 0,
    ) -> None:
        """Replace the image with a snapshot's contents. Anything the snapshot does not hold is removed,
        and any batches accumulated but not yet published are discarded."""
        self._check_usable()
        delta = MetadataDelta(self._image)
        for index, record in enumerate(records):
            try:
                delta.replay(record)
            except MetadataReplayError as e:
                self._fail(f"snapshot ending at offset {last_contained_offset}, record #{index}", e)
        delta.finish_snapshot()
        provenance = MetadataProvenance(
            last_contained_offset=last_contained_offset,
            last_contained_epoch=last_contained_epoch,
            last_contained_log_time_ms=last_contained_log_time_ms,
            is_offset_batch_aligned=True,
        )
        image = self._apply(delta, provenance)
        self._reset_to_image(image)
        manifest = SnapshotManifest(provenance=provenance, elapsed_ns=elapsed_ns)
        self._publish(delta, image=image, manifest=manifest)

    def handle_leader_change(self, leader_and_epoch: LeaderAndEpoch) -> None:
        self._leader_and_epoch = leader_and_epoch
        for publisher in list(self._publishers):
            self._call(
                publisher, what="on_controller_change", action=lambda p: p.on_controller_change(leader_and_epoch)
            )

    def update_high_watermark(self, high_watermark: int, *, elapsed_ns: int = 0) -> None:
        """The raft layer's high watermark moved; may open the catch-up gate for waiting publishers."""
        self._high_watermark = high_watermark
        self._initialize_new_publishers(elapsed_ns=elapsed_ns)

    def install_publishers(self, publishers: Sequence[MetadataPublisher], *, elapsed_ns: int = 0) -> None:
        """Add publishers after the existing ones. Each first receives the whole current image as one
        delta from the empty image, as soon as the loader has caught up."""
        names = {p.name for p in self._publishers} | {p.name for p in self._uninitialized}
        for publisher in publishers:
            if publisher.name in names:
                raise ValueError(f"a publisher named {publisher.name!r} is already installed")
            names.add(publisher.name)
        self._uninitialized.extend(publishers)
        self._initialize_new_publishers(elapsed_ns=elapsed_ns)

    def remove_publisher(self, name: str) -> MetadataPublisher:
        for group in (self._publishers, self._uninitialized):
            for publisher in group:
                if publisher.name == name:
                    group.remove(publisher)
                    return publisher
        raise KeyError(f"no publisher named {name!r}")

    # -- batch folding ------------------------------------------------------------------------------

    def _reset_to_image(self, image: MetadataImage) -> None:
        self._image = image
        self._has_seen_record = True
        self._delta = MetadataDelta(image)
        self._transaction = _TransactionState.NONE
        self._last_offset = image.provenance.last_contained_offset
        self._last_epoch = image.provenance.last_contained_epoch
        self._last_log_time_ms = image.provenance.last_contained_log_time_ms
        self._num_bytes = 0
        self._num_batches = 0
        self._elapsed_ns = 0

    def _load_batch(self, batch: CommittedBatch[object]) -> None:
        if batch.base_offset <= self._last_offset:
            raise ValueError(
                f"batch at offset {batch.base_offset} is not after the loader's last offset {self._last_offset}"
            )
        self._last_log_time_ms = batch.append_timestamp_ms
        self._last_epoch = batch.epoch
        records = batch.records
        count = len(records)
        index = 0
        while index < count:
            record = records[index]
            offset = batch.base_offset + index
            try:
                self._replay(record)
            except MetadataReplayError as e:
                self._fail(f"log record at offset {offset}", e)
            if self._transaction is _TransactionState.STARTED and (index > 0 or self._num_batches > 0):
                # Publish what preceded the Begin, so that an abort can return to that image.
                self._apply_and_publish(self._log_manifest(is_offset_batch_aligned=index == 0))
                self._transaction = _TransactionState.STARTED
            self._last_offset = offset
            index += 1
            if type(record) is PartitionChangeRecord:
                index = self._replay_partition_changes(records, index, base_offset=batch.base_offset)
        self._last_offset = batch.last_offset
        self._num_bytes += batch.size_in_bytes
        self._num_batches += 1

    def _replay_partition_changes(self, records: Sequence[object], start: int, *, base_offset: int) -> int:
        """The PartitionChangeRecords from `start` on (after one replayed alone, which settled the
        transaction state they leave as it is), replayed together; the index after them. A run
        the delta refuses is left to the record-by-record loop, which names the failing record."""
        if isinstance(records, RecordParts):
            return self._replay_change_run(records, start, base_offset=base_offset)
        end = start
        count = len(records)
        while end < count and type(records[end]) is PartitionChangeRecord:
            end += 1
        if end - start < 2:
            return start
        try:
            self._delta.replay_partition_changes(cast("Sequence[PartitionChangeRecord]", records[start:end]))
        except MetadataReplayError:
            return start
        self._last_offset = base_offset + end - 1
        return end

    def _replay_change_run(self, records: RecordParts[object], start: int, *, base_offset: int) -> int:
        """As `_replay_partition_changes`, where `start` is inside a fan-out's run (`record_runs`):
        the rest of that run is replayed from its columns, without building its records."""
        if start >= len(records):
            return start
        part, part_start = records.part_at(start)
        if not isinstance(part, PartitionChangeRun) or part_start + len(part) - start < 2:
            return start
        end = part_start + len(part)
        try:
            self._delta.replay_partition_change_run(part[start - part_start :])
        except MetadataReplayError:
            return start
        self._last_offset = base_offset + end - 1
        return end

    def _replay(self, record: object) -> None:
        state = self._transaction
        if type(record) not in _TRANSACTION_MARKERS:
            # Almost every record: one set lookup by type; the transaction markers are the rare case.
            if state is _TransactionState.STARTED:
                self._transaction = _TransactionState.CONTINUED
            elif state in (_TransactionState.ENDED, _TransactionState.ABORTED):
                self._transaction = _TransactionState.NONE
            self._delta.replay(record)
        elif isinstance(record, BeginTransactionRecord):
            if state in _IN_TRANSACTION:
                raise MetadataReplayError("BeginTransactionRecord inside an open metadata transaction")
            self._transaction = _TransactionState.STARTED
        elif isinstance(record, EndTransactionRecord):
            if state not in _IN_TRANSACTION:
                raise MetadataReplayError("EndTransactionRecord without a BeginTransactionRecord")
            self._transaction = _TransactionState.ENDED
        else:
            if state not in _IN_TRANSACTION:
                raise MetadataReplayError("AbortTransactionRecord without a BeginTransactionRecord")
            self._transaction = _TransactionState.ABORTED
            self._delta = MetadataDelta(self._image)

    def _log_manifest(self, *, is_offset_batch_aligned: bool) -> LogDeltaManifest:
        return LogDeltaManifest(
            provenance=MetadataProvenance(
                last_contained_offset=self._last_offset,
                last_contained_epoch=self._last_epoch,
                last_contained_log_time_ms=self._last_log_time_ms,
                is_offset_batch_aligned=is_offset_batch_aligned,
            ),
            leader_and_epoch=self._leader_and_epoch,
            num_batches=self._num_batches,
            elapsed_ns=self._elapsed_ns,
            num_bytes=self._num_bytes,
        )

    def _maybe_flush(self) -> None:
        if self._num_batches == 0 or self._transaction in _IN_TRANSACTION:
            return
        self._apply_and_publish(self._log_manifest(is_offset_batch_aligned=True))

    def _apply_and_publish(self, manifest: LogDeltaManifest) -> None:
        delta = self._delta
        image = self._apply(delta, manifest.provenance)
        self._reset_to_image(image)
        self._publish(delta, image=image, manifest=manifest)

    def _apply(self, delta: MetadataDelta, provenance: MetadataProvenance) -> MetadataImage:
        try:
            return delta.apply(provenance)
        except MetadataReplayError as e:
            self._fail(f"the delta ending at offset {provenance.last_contained_offset}", e)

    # -- publishing ---------------------------------------------------------------------------------

    def _still_catching_up(self, offset: int) -> bool:
        if not self._catching_up:
            return False
        if self._high_watermark is None or self._high_watermark - 1 > offset or not self._has_seen_record:
            return True
        self._catching_up = False
        return False

    def _publish(self, delta: MetadataDelta, *, image: MetadataImage, manifest: LoaderManifest) -> None:
        if self._still_catching_up(manifest.provenance.last_contained_offset):
            return
        for publisher in list(self._publishers):
            self._call(
                publisher,
                what="on_metadata_update",
                action=lambda p: p.on_metadata_update(delta, image=image, manifest=manifest),
            )
        self._initialize_new_publishers(elapsed_ns=0)

    def _initialize_new_publishers(self, *, elapsed_ns: int) -> None:
        if not self._uninitialized or self._still_catching_up(self._image.offset):
            return
        image = self._image
        # A delta from the empty image that holds the whole current image: the new publishers have
        # seen nothing yet, so "everything changed" is the truth for them.
        delta = MetadataDelta(MetadataImage.EMPTY)
        image.write(_DeltaRewriter(delta))
        delta.finish_snapshot()
        manifest = SnapshotManifest(provenance=image.provenance, elapsed_ns=elapsed_ns)
        waiting, self._uninitialized = self._uninitialized, []
        for publisher in waiting:
            self._publishers.append(publisher)
            self._call(
                publisher,
                what="on_metadata_update",
                action=lambda p: p.on_metadata_update(delta, image=image, manifest=manifest),
            )
            self._call(
                publisher, what="on_controller_change", action=lambda p: p.on_controller_change(self._leader_and_epoch)
            )

    def _call(
        self, publisher: MetadataPublisher, *, what: str, action: Callable[[MetadataPublisher], None]
    ) -> None:
        try:
            action(publisher)
        except Exception as e:
            if self._publisher_fault_handler is None:
                raise
            self._publisher_fault_handler(
                f"publisher {publisher.name!r} failed in {what} at offset {self._image.offset}", e
            )

    # -- faults ---------------------------------------------------------------------------------------

    def _fail(self, where: str, error: MetadataReplayError) -> NoReturn:
        self._failure = MetadataReplayError(f"cannot replay {where}: {error}")
        raise self._failure from error

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise MetadataReplayError(f"the metadata loader stopped after a fault: {self._failure}")


class _DeltaRewriter:
    """An image writer that replays each written record straight into a delta (Kafka's ImageReWriter)."""

    def __init__(self, delta: MetadataDelta) -> None:
        self._delta = delta

    def write(self, record: object, version: int) -> None:
        self._delta.replay(record)
