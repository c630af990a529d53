"""Everything a call into the node asks the driver to do, as plain data.

The node never performs I/O. Each public method returns an `Output`, and the driver performs its
parts in this order (the ordering contract):

1. `persist`: write the quorum-state file durably (tmp + fsync + rename) before anything else.
   The in-memory role has already changed; nothing that reveals it has left the node yet.
2. `flush`: the log has already been mutated in place (appends, truncations); `flush` asks for
   everything below `LogFlush.end_offset` to be made durable. The driver may do that off its
   event loop and in parallel with the rest of this Output (sends included: the leader's fsync
   overlaps replication to the followers), and reports completion with
   `handle_log_flushed(flush)`. The node counts only flushed offsets: the leader counts itself
   toward the high watermark, and a follower reports a fetch offset, only up to what a
   completed flush covered. A driver that never reports a flush stalls the node, never breaks it.
3. `messages`: send the requests (each with a `token`; report its outcome with
   `handle_response(token, ...)`) and the responses to earlier inbound requests (matched by the
   token the driver passed to `handle_request`).
4. `events`: deliver to the state machine, in order: `SnapshotLoad`, `CommittedBatch`,
   `LeaderChange` (Kafka's handleLoadSnapshot / handleCommit / handleLeaderChange).
5. Call `poll(now_ms)` again no later than `next_deadline_ms`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar, cast

from kraft_engine.raft.messages import RaftResponse, SentRequest
from kraft_engine.raft.quorum_state import ElectionState
from kraft_engine.raft.voter_set import Endpoint
from kraft_engine.records.log_batch import LogBatch, OffsetAndEpoch, parse_batches

RecordT = TypeVar("RecordT")
OtherRecordT = TypeVar("OtherRecordT")

__all__ = [
    "CommittedBatch",
    "LeaderAndEpoch",
    "LeaderChange",
    "ListenerEvent",
    "LogFlush",
    "OutboundRequest",
    "OutboundResponse",
    "Output",
    "RequestFailure",
    "SnapshotLoad",
]


@dataclass(frozen=True, slots=True)
class LeaderAndEpoch:
    """The leader as this node knows it; `leader_id` is None while unknown."""

    UNKNOWN: ClassVar[LeaderAndEpoch]

    leader_id: int | None
    epoch: int


LeaderAndEpoch.UNKNOWN = LeaderAndEpoch(None, 0)


@dataclass(frozen=True, slots=True)
class OutboundRequest:
    """A request to send to `destination_id` at one of `endpoints` (the driver picks its listener).

    Bootstrap servers (controller.quorum.bootstrap.servers) have negative destination ids.
    """

    token: int
    destination_id: int
    endpoints: tuple[Endpoint, ...]
    request: SentRequest
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class OutboundResponse:
    """The answer to the inbound request the driver submitted with `token`."""

    token: int
    response: RaftResponse


class RequestFailure(Enum):
    """Why a request got no response (passed to `handle_response` instead of a response).

    - DISCONNECTED: the connection failed: refused (ECONNREFUSED), reset (ECONNRESET, EPIPE),
      closed by the peer before the answer (EOF), or never set up (no endpoint, a connect attempt
      that failed or timed out).
    - TIMED_OUT: the request went out on a working connection and no answer came in time.
    - UNSUPPORTED_VERSION: the peer does not serve this api or version.

    The core reads DISCONNECTED from its leader as a sign the leader is gone (a follower retries
    at once and stands if that fails too), so a driver must never report a slow answer as
    DISCONNECTED.
    """

    DISCONNECTED = "disconnected"
    TIMED_OUT = "timed out"
    UNSUPPORTED_VERSION = "unsupported version"


class CommittedBatch(Generic[RecordT]):
    """handleCommit: one committed batch (Kafka's `Batch<T>`).

    As raft delivers it, a data batch carries its records' values as bytes and a control batch
    carries `control_records` (LeaderChange, Voters, KRaftVersion) and no data records; a state
    machine decodes the values into its own records with `with_records`, keeping the offsets.
    Record i sits at `base_offset + i`; a batch without records still says where it ended.

    Raft delivers a batch read from its log (`of`) with its values still undecoded: they are
    decoded on the first read of `records`, by the state machine on its own thread, not on raft's
    loop (as `SnapshotLoad.batches`). A follower's loop then only moves bytes on the way to the
    next Fetch: decoding the fence of 100k partitions there (ten 10,000-record batches) came
    before every append and delayed its commit by as much.
    """

    __slots__ = ("_records", "_undecoded", "append_timestamp_ms", "base_offset", "control_records", "epoch",
                 "last_offset", "raw", "size_in_bytes")

    base_offset: int
    epoch: int
    last_offset: int
    append_timestamp_ms: int
    size_in_bytes: int
    control_records: tuple[Any, ...]
    raw: bytes
    _records: tuple[RecordT, ...] | None  # None until the values of `_undecoded` are read
    _undecoded: LogBatch | None

    def __init__(
        self,
        base_offset: int,
        epoch: int,
        records: tuple[RecordT, ...],
        last_offset: int,
        *,
        append_timestamp_ms: int = -1,
        size_in_bytes: int = 0,
        control_records: tuple[Any, ...] = (),
        raw: bytes = b"",
    ) -> None:
        if records and last_offset != base_offset + len(records) - 1:
            raise ValueError(
                f"batch at {base_offset} holds {len(records)} records but claims last offset {last_offset}"
            )
        self._set(base_offset=base_offset, epoch=epoch, last_offset=last_offset,
                  append_timestamp_ms=append_timestamp_ms, size_in_bytes=size_in_bytes,
                  control_records=control_records, raw=raw, _records=records, _undecoded=None)

    def _set(self, **values: object) -> None:
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"CommittedBatch is immutable: cannot set {name}")

    @staticmethod
    def of(batch: LogBatch) -> CommittedBatch[bytes]:
        """The batch as raft delivers it: its values decoded from `batch` on the first read."""
        committed: CommittedBatch[bytes] = CommittedBatch.__new__(CommittedBatch)
        committed._set(base_offset=batch.base_offset, epoch=batch.epoch, last_offset=batch.last_offset,
                       append_timestamp_ms=batch.append_timestamp_ms, size_in_bytes=batch.size_in_bytes,
                       control_records=batch.control_records, raw=batch.raw,
                       _records=() if batch.is_control else None, _undecoded=None if batch.is_control else batch)
        return committed

    @property
    def records(self) -> tuple[RecordT, ...]:
        records: tuple[RecordT, ...] | None = self._records
        if records is None:
            # Two threads may both decode: the values are equal, and either one is kept.
            undecoded = self._undecoded
            if undecoded is None:  # the other thread decoded them in between
                return self.records
            records = cast("tuple[RecordT, ...]", undecoded.records)
            self._set(_records=records, _undecoded=None)
        return records

    @property
    def record_count(self) -> int:
        """How many records `records` holds, without decoding them."""
        records = self._records
        return len(records) if records is not None else self.last_offset - self.base_offset + 1

    def with_records(self, records: tuple[OtherRecordT, ...]) -> CommittedBatch[OtherRecordT]:
        """The same batch holding `records` (the decoded form of this batch's values)."""
        return CommittedBatch(
            base_offset=self.base_offset,
            epoch=self.epoch,
            records=records,
            last_offset=self.last_offset,
            append_timestamp_ms=self.append_timestamp_ms,
            size_in_bytes=self.size_in_bytes,
            control_records=self.control_records,
            raw=self.raw,
        )

    def _key(self) -> tuple[object, ...]:
        return (self.base_offset, self.epoch, self.records, self.last_offset, self.append_timestamp_ms,
                self.size_in_bytes, self.control_records, self.raw)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CommittedBatch):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.base_offset, self.epoch, self.last_offset))

    def __repr__(self) -> str:
        return (f"CommittedBatch(base_offset={self.base_offset}, epoch={self.epoch}, records={self.records!r}, "
                f"last_offset={self.last_offset}, append_timestamp_ms={self.append_timestamp_ms}, "
                f"size_in_bytes={self.size_in_bytes}, control_records={self.control_records!r})")


class SnapshotLoad:
    """handleLoadSnapshot: replace the state machine's state with this snapshot's content.

    `batches` are the snapshot's batches in order (header, kraft.version and voters control
    batches, data batches, footer); data batches carry the state machine's records. Raft hands
    the snapshot's bytes (`data`), parsed into batches on first use: by the state machine, on
    its own thread, not on raft's loop (a 100k-partition snapshot is ~0.2 s of CPU to parse).
    """

    __slots__ = ("_batches", "_data", "last_contained_log_timestamp_ms", "snapshot_id")

    def __init__(
        self,
        *,
        snapshot_id: OffsetAndEpoch,
        last_contained_log_timestamp_ms: int,
        batches: tuple[CommittedBatch[bytes], ...] | None = None,
        data: bytes = b"",
    ) -> None:
        self.snapshot_id = snapshot_id
        self.last_contained_log_timestamp_ms = last_contained_log_timestamp_ms
        self._batches = batches
        self._data = data

    @property
    def batches(self) -> tuple[CommittedBatch[bytes], ...]:
        batches = self._batches
        if batches is None:
            # Two readers may both parse: the results are equal, and either one is kept.
            batches = self._batches = tuple(CommittedBatch.of(b) for b in parse_batches(self._data))
        return batches

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SnapshotLoad):
            return NotImplemented
        return (self.snapshot_id, self.last_contained_log_timestamp_ms, self.batches) == (
            other.snapshot_id, other.last_contained_log_timestamp_ms, other.batches)

    def __hash__(self) -> int:
        return hash((self.snapshot_id, self.last_contained_log_timestamp_ms))

    def __repr__(self) -> str:
        return (f"SnapshotLoad(snapshot_id={self.snapshot_id!r}, "
                f"last_contained_log_timestamp_ms={self.last_contained_log_timestamp_ms})")


@dataclass(frozen=True, slots=True)
class LeaderChange:
    """handleLeaderChange. For a new local leader it fires only once the listener has been given
    every record before the epoch's start offset."""

    leader: LeaderAndEpoch


ListenerEvent = SnapshotLoad | CommittedBatch[bytes] | LeaderChange


@dataclass(frozen=True, slots=True)
class LogFlush:
    """Make the log durable below `end_offset`, then hand this back to `handle_log_flushed`.

    `truncations` is the node's count of log truncations when it asked: a flush asked for before
    a truncation covers bytes that may since have been cut and rewritten, so the node ignores it.
    """

    end_offset: int
    truncations: int


@dataclass(slots=True)
class Output:
    """What the driver must do after one call; see the module docstring for the order."""

    persist: ElectionState | None = None
    flush: LogFlush | None = None
    messages: list[OutboundRequest | OutboundResponse] = field(default_factory=list)
    events: list[ListenerEvent] = field(default_factory=list)
    next_deadline_ms: int = 0
    shutdown_complete: bool = False

    @property
    def requests(self) -> list[OutboundRequest]:
        return [m for m in self.messages if isinstance(m, OutboundRequest)]

    @property
    def responses(self) -> list[OutboundResponse]:
        return [m for m in self.messages if isinstance(m, OutboundResponse)]


class Outbox:
    """The Output one call into the node assembles; every part of the node writes to it, and the
    node hands it over (and starts a new one) when the call returns."""

    __slots__ = ("output",)

    def __init__(self) -> None:
        self.output = Output()

    def respond(self, token: int, response: RaftResponse) -> None:
        self.output.messages.append(OutboundResponse(token=token, response=response))

    def send(self, request: OutboundRequest) -> None:
        self.output.messages.append(request)

    def deliver(self, event: ListenerEvent) -> None:
        self.output.events.append(event)

    def take(self) -> Output:
        out, self.output = self.output, Output()
        return out
