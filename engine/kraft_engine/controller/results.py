"""What a controller operation produces, and what the controller hands back to its shell.

Control managers never touch the log: an operation returns a `ControllerResult` (the records to
append and the response to give once they are stable). The quorum controller appends the records
through its raft port (`raft_port.RaftAppendPort`, which alone assigns their offsets) and collects
completions, failures and a resignation in `ControllerEffects` for the shell to perform.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, NamedTuple, TypeVar, overload

from kio.schema.errors import ErrorCode

from kraft_engine.errors import ControllerError
from kraft_engine.records import (
    PartitionChangeRun,
    RecordParts,
    encode_metadata_record_parts,
    encode_metadata_records,
)

__all__ = [
    "MAX_PARTITIONS_PER_BATCH",
    "MAX_RECORDS_PER_BATCH",
    "MAX_RECORDS_PER_USER_OP",
    "ApiError",
    "RecordAndVersion",
    "RecordList",
    "RecordSink",
    "VersionedRun",
    "ControllerApiError",
    "ControllerEffects",
    "ControllerResult",
    "FailedWrite",
    "check_request_size",
    "check_user_op_size",
    "encode_records",
    "records_only",
]

R = TypeVar("R")

MAX_RECORDS_PER_BATCH = 10000
"""Kafka's maxRecordsPerBatch: the most records in one Raft batch (and so in an atomic result)."""

MAX_RECORDS_PER_USER_OP = 10000
"""Kafka's MAX_RECORDS_PER_USER_OP: the most records any single client request may generate."""


class ControllerApiError(ControllerError):
    """An expected refusal of a client request: the shell answers it with `error_code`.

    Anything else raised by an operation is a bug, not a client error."""

    def __init__(self, error_code: ErrorCode, message: str | None = None) -> None:
        super().__init__(message or error_code.name)
        self.error_code = error_code
        self.message = message


class RecordAndVersion(NamedTuple):
    """A metadata record and the version to write it at (Kafka's ApiMessageAndVersion).

    The record is an instance of the latest record class; metadata.version decides the version."""

    record: object
    version: int


class VersionedRun(Sequence[RecordAndVersion]):
    """A `PartitionChangeRun` read as (record, version) pairs: how a fan-out's records sit among a
    write's other records (`RecordList`)."""

    __slots__ = ("run",)

    def __init__(self, run: PartitionChangeRun) -> None:
        self.run = run

    def __len__(self) -> int:
        return len(self.run)

    @overload
    def __getitem__(self, index: int) -> RecordAndVersion: ...

    @overload
    def __getitem__(self, index: slice) -> VersionedRun: ...

    def __getitem__(self, index: int | slice) -> RecordAndVersion | VersionedRun:
        if isinstance(index, slice):
            return VersionedRun(self.run[index])
        return RecordAndVersion(self.run[index], self.run.version)

    def __iter__(self) -> Iterator[RecordAndVersion]:
        version = self.run.version
        for record in self.run:
            yield RecordAndVersion(record, version)


class RecordList(Sequence[RecordAndVersion]):
    """A write's records as it generates them: records appended one by one, and the runs of a
    partition-change fan-out kept as columns (`records.record_runs`), which the raft port
    encodes, the controller replays and the loader applies per distinct change. Read item by
    item it is the list of (record, version) pairs it stands for."""

    __slots__ = ("_length", "_parts")

    def __init__(self, items: Iterable[RecordAndVersion] = ()) -> None:
        self._parts: list[list[RecordAndVersion] | VersionedRun] = []
        self._length = 0
        self.extend(items)

    def append(self, item: RecordAndVersion) -> None:
        parts = self._parts
        if not parts or not isinstance(parts[-1], list):
            parts.append([])
        last = parts[-1]
        if not isinstance(last, list):
            raise TypeError("record list parts out of order")
        last.append(item)
        self._length += 1

    def extend(self, items: Iterable[RecordAndVersion]) -> None:
        for item in items:
            self.append(item)

    def append_run(self, run: PartitionChangeRun) -> None:
        if len(run):
            self._parts.append(VersionedRun(run))
            self._length += len(run)

    def frozen(self) -> RecordParts[RecordAndVersion]:
        """The records as they are now, sliceable into batches without building a record."""
        return RecordParts(list(part) if isinstance(part, list) else part for part in self._parts)

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> RecordAndVersion: ...

    @overload
    def __getitem__(self, index: slice) -> RecordParts[RecordAndVersion]: ...

    def __getitem__(self, index: int | slice) -> RecordAndVersion | RecordParts[RecordAndVersion]:
        return self.frozen()[index]

    def __iter__(self) -> Iterator[RecordAndVersion]:
        for part in self._parts:
            yield from part

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (RecordList, RecordParts, list, tuple)):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"RecordList({list(self)!r})"


RecordSink = list[RecordAndVersion] | RecordList
"""Where a manager's generation puts its records: a fan-out keeps its run whole in a `RecordList`."""


def encode_records(records: Sequence[RecordAndVersion]) -> list[bytes]:
    """The framed bytes of each record, runs encoded per distinct change (`encode_metadata_record_parts`)."""
    if isinstance(records, RecordList):
        records = records.frozen()
    if isinstance(records, RecordParts):
        return encode_metadata_record_parts(part.run if isinstance(part, VersionedRun) else part
                                            for part in records.parts)
    return encode_metadata_records(records)


def records_only(records: Sequence[RecordAndVersion]) -> Sequence[object]:
    """The records without their versions, runs kept as runs (for the loader of the node that wrote them)."""
    if isinstance(records, RecordList):
        records = records.frozen()
    if isinstance(records, RecordParts):
        return RecordParts[object](
            part.run if isinstance(part, VersionedRun) else tuple(record for record, _ in part)
            for part in records.parts
        )
    return tuple(record for record, _ in records)


@dataclass(frozen=True, slots=True)
class ApiError:
    """An error code and message carried inside a successful write's response (Kafka's
    ApiError): per-item results of batch requests, or UpdateFeatures' top-level error."""

    error_code: ErrorCode
    message: str | None = None

    NONE: ClassVar[ApiError]

    def is_success(self) -> bool:
        return self.error_code == ErrorCode.none


ApiError.NONE = ApiError(ErrorCode.none)


@dataclass(frozen=True, slots=True)
class ControllerResult(Generic[R]):
    """Records to append plus the response to complete once they are stable.

    An atomic result is written as one Raft batch (all or nothing) and may not exceed
    MAX_RECORDS_PER_BATCH; a non-atomic one is split across as many batches as it needs."""

    records: Sequence[RecordAndVersion]
    response: R
    is_atomic: bool = False

    def without_records(self) -> ControllerResult[R]:
        """The same response with no records: what validate-only requests return."""
        return ControllerResult((), self.response, self.is_atomic)


MAX_PARTITIONS_PER_BATCH = 10_000
"""Kafka's ReplicationControlManager.MAX_PARTITIONS_PER_BATCH: partitions one CreateTopics may ask for."""

_TOO_LARGE = "Unable to perform excessively large batch operation."


def check_request_size(items: int) -> None:
    """Refuse, before any record is built, a request whose `items` (topics, configs, partitions)
    would each need a record: more than MAX_RECORDS_PER_USER_OP can never be written as one
    operation, so Kafka's BoundedList would refuse it mid-way with the same message."""
    if items > MAX_RECORDS_PER_USER_OP:
        raise ControllerApiError(ErrorCode.policy_violation, _TOO_LARGE)


def check_user_op_size(records: Sequence[RecordAndVersion]) -> None:
    """Refuse a client operation that would generate too many records (Kafka's BoundedList)."""
    if len(records) > MAX_RECORDS_PER_USER_OP:
        # Kafka's message for a BoundedListTooLongException surfacing from an operation.
        raise ControllerApiError(ErrorCode.policy_violation, _TOO_LARGE)


@dataclass(frozen=True, slots=True)
class FailedWrite:
    """A write that will never complete successfully: answer the client with `error`."""

    token: int
    error: ControllerApiError


@dataclass(slots=True)
class ControllerEffects:
    """Everything the shell must do after feeding the controller events, in order."""

    completed: list[tuple[int, object]] = field(default_factory=list)
    failed: list[FailedWrite] = field(default_factory=list)
    resign_epoch: int | None = None
    """Set when the controller renounced leadership: tell the raft layer to resign this epoch."""
    faults: list[tuple[str, BaseException]] = field(default_factory=list)
    """Unexpected errors while generating records (event name, error): the shell logs them; the
    controller already renounced and failed the write with UNKNOWN_SERVER_ERROR."""

    def is_empty(self) -> bool:
        return not (self.completed or self.failed or self.faults) and self.resign_epoch is None


