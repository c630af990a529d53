"""The voter set and kraft.version as of every offset, read from the log's control records.

Kafka's KRaftControlRecordStateMachine: a VotersRecord or KRaftVersionRecord takes effect as soon
as it is *read* (appended), even before it commits, and is reverted if the log is truncated below
it. Keeping the history by offset also answers "which voters as of offset N" when a snapshot is
frozen at N. Under kraft.version 0 the static voters from config are the only entry.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Final

from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.voters_record.v0.data import VotersRecord

from kraft_engine.raft.log import RaftLog, control_batches, read_snapshot_bytes
from kraft_engine.raft.voter_set import KRAFT_VERSION_0, VoterSet
from kraft_engine.records.log_batch import LogBatch, parse_batches

__all__ = ["VoterSetHistory", "load_control_state"]

# How much of the log one read covers while replaying it.
_READ_BYTES: Final = 1024 * 1024

# Entries from config (static voters) sit before every log offset.
_STATIC_OFFSET = -1


class VoterSetHistory:
    """Offset-indexed history of voter sets and kraft.version levels."""

    def __init__(self, static_voters: VoterSet | None) -> None:
        self._static_voters = static_voters
        self._voter_offsets: list[int] = []
        self._voter_sets: list[VoterSet] = []
        self._version_offsets: list[int] = []
        self._versions: list[int] = []
        self.clear()

    def clear(self) -> None:
        self._voter_offsets, self._voter_sets = [], []
        self._version_offsets, self._versions = [], []
        if self._static_voters is not None:
            self._voter_offsets.append(_STATIC_OFFSET)
            self._voter_sets.append(self._static_voters)

    def clear_voters(self) -> None:
        """Drop every voter entry, static ones included (a snapshot's VotersRecord replaces them)."""
        self._voter_offsets, self._voter_sets = [], []

    # -- updates -------------------------------------------------------------------------------
    def add_voter_set(self, offset: int, voters: VoterSet) -> None:
        if self._voter_offsets and self._voter_offsets[-1] >= offset:
            raise ValueError(f"voter set at offset {offset} is not after the last one at {self._voter_offsets[-1]}")
        self._voter_offsets.append(offset)
        self._voter_sets.append(voters)

    def add_kraft_version(self, offset: int, version: int) -> None:
        if self._version_offsets and self._version_offsets[-1] >= offset:
            raise ValueError(f"kraft.version at offset {offset} is not after the last one")
        self._version_offsets.append(offset)
        self._versions.append(version)

    def replay(self, batches: Iterable[LogBatch]) -> bool:
        """Apply the control records of `batches`; returns True if the voter set changed."""
        changed = False
        for batch in batches:
            if not batch.is_control:
                continue
            for index, record in enumerate(batch.control_records):
                offset = batch.base_offset + index
                if isinstance(record, VotersRecord):
                    self.add_voter_set(offset, VoterSet.from_record(record))
                    changed = True
                elif isinstance(record, KRaftVersionRecord):
                    self.add_kraft_version(offset, record.k_raft_version)
        return changed

    def truncate_new_entries(self, end_offset: int) -> bool:
        """Forget entries at or after `end_offset` (the log was truncated); True if voters changed."""
        cut = bisect.bisect_left(self._voter_offsets, end_offset)
        changed = cut < len(self._voter_offsets)
        del self._voter_offsets[cut:], self._voter_sets[cut:]
        cut = bisect.bisect_left(self._version_offsets, end_offset)
        del self._version_offsets[cut:], self._versions[cut:]
        return changed

    def truncate_old_entries(self, start_offset: int) -> None:
        """Drop entries superseded before `start_offset`, keeping the one in force there."""
        keep = max(bisect.bisect_right(self._voter_offsets, start_offset) - 1, 0)
        del self._voter_offsets[:keep], self._voter_sets[:keep]
        keep = max(bisect.bisect_right(self._version_offsets, start_offset) - 1, 0)
        del self._version_offsets[:keep], self._versions[:keep]

    # -- queries -------------------------------------------------------------------------------
    def latest_voter_set(self) -> VoterSet:
        return self._voter_sets[-1] if self._voter_sets else VoterSet(())

    def latest_voter_set_offset(self) -> int | None:
        """Offset of the latest VotersRecord (None when the voters come from config or nowhere)."""
        if not self._voter_offsets or self._voter_offsets[-1] == _STATIC_OFFSET:
            return None
        return self._voter_offsets[-1]

    def voter_set_at(self, offset: int) -> VoterSet:
        index = bisect.bisect_right(self._voter_offsets, offset) - 1
        return self._voter_sets[index] if index >= 0 else VoterSet(())

    def kraft_version(self) -> int:
        return self._versions[-1] if self._versions else KRAFT_VERSION_0

    def kraft_version_at(self, offset: int) -> int:
        index = bisect.bisect_right(self._version_offsets, offset) - 1
        return self._versions[index] if index >= 0 else KRAFT_VERSION_0

    def latest_kraft_version_offset(self) -> int | None:
        return self._version_offsets[-1] if self._version_offsets else None


def load_control_state(history: VoterSetHistory, log: RaftLog) -> None:
    """Rebuild `history` from the log's latest snapshot plus the whole log after it."""
    history.clear()
    snapshots = log.snapshot_ids()
    if snapshots:
        latest = snapshots[-1]
        voters: VoterSet | None = None
        version: int | None = None
        for batch in control_batches(read_snapshot_bytes(log, latest)):
            for record in batch.control_records:
                if isinstance(record, VotersRecord):
                    voters = VoterSet.from_record(record)
                elif isinstance(record, KRaftVersionRecord):
                    version = int(record.k_raft_version)
        at = latest.offset - 1
        if voters is not None:
            history.clear_voters()
            history.add_voter_set(at, voters)
        if version is not None:
            history.add_kraft_version(at, version)
    # The snapshot already holds every control record before its offset; replay only the rest.
    offset = max(log.log_start_offset, snapshots[-1].offset if snapshots else 0)
    end = log.end_offset().offset
    while offset < end:
        batches = [b for b in parse_batches(log.read(offset, _READ_BYTES)) if b.base_offset >= offset]
        if not batches:
            break
        history.replay(batches)
        offset = batches[-1].next_offset
