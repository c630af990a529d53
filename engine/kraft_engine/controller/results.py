"""What a controller operation produces, and what the controller hands back to its shell.

Control managers never touch the log: an operation returns a `ControllerResult` (the records to
append and the response to give once they are stable). The quorum controller appends the records
through its raft port (`raft_port.RaftAppendPort`, which alone assigns their offsets) and collects
completions, failures and a resignation in `ControllerEffects` for the shell to perform.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Generic, NamedTuple, TypeVar

from kio.schema.errors import ErrorCode

from kraft_engine.errors import ControllerError

__all__ = [
    "MAX_PARTITIONS_PER_BATCH",
    "MAX_RECORDS_PER_BATCH",
    "MAX_RECORDS_PER_USER_OP",
    "ApiError",
    "RecordAndVersion",
    "ControllerApiError",
    "ControllerEffects",
    "ControllerResult",
    "FailedWrite",
    "check_request_size",
    "check_user_op_size",
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


