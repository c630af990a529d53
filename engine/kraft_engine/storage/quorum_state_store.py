"""The `quorum-state` file: the election state a KRaft replica must never forget.

Raft's safety rests on a replica never voting twice in one epoch and never going back to an older
epoch, so the epoch, the leader and the vote are persisted *before* the replica acts on them.
Kafka stores them as one line of JSON — the `QuorumStateData` schema written by Jackson plus a
`data_version` field — and we write the identical bytes so that either implementation can read
the other's file:

    {"leaderId":1,"leaderEpoch":2,"votedId":-1,"votedDirectoryId":"AAAAAAAAAAAAAAAAAAAAAA","data_version":1}

Version 1 (kraft.version 1, KIP-853) carries `votedDirectoryId`, with the all-zero Uuid meaning
"no directory id". Version 0 (kraft.version 0) carries `clusterId` (always ""), `appliedOffset`
(always 0) and `currentVoters` instead; we read both and write whichever the caller asks for.

Writes go through `atomic_replace`, so after a crash the file holds the old or the new state.
A file that cannot be parsed is an error naming the path, never a silent reset: forgetting a
vote is exactly the failure this file exists to prevent.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kraft_engine.errors import StorageError
from kraft_engine.kafka_uuid import ZERO_UUID, from_kafka_str, to_kafka_str
from kraft_engine.storage.atomic_file import TMP_SUFFIX, atomic_replace

__all__ = [
    "QUORUM_STATE_FILE_NAME",
    "FileQuorumStateStore",
    "QuorumStateData",
    "QuorumStateError",
]

QUORUM_STATE_FILE_NAME = "quorum-state"

_NO_ID = -1
_SUPPORTED_VERSIONS = (0, 1)


class QuorumStateError(StorageError):
    """The quorum-state file exists but cannot be trusted; the message names the file."""


@dataclass(frozen=True, slots=True)
class QuorumStateData:
    """The persisted election state. `None` stands for Kafka's -1 / zero-Uuid sentinels."""

    leader_epoch: int
    leader_id: int | None = None
    voted_id: int | None = None
    voted_directory_id: uuid.UUID | None = None
    # Only version 0 stores the voter set; version 1 keeps voters in the log (VotersRecord).
    current_voters: tuple[int, ...] = ()


def _encode(state: QuorumStateData, data_version: int) -> bytes:
    # Field order follows the schema, as Jackson emits it; separators match Jackson's compact form.
    body: dict[str, Any] = {}
    if data_version == 0:
        body["clusterId"] = ""
    body["leaderId"] = _NO_ID if state.leader_id is None else state.leader_id
    body["leaderEpoch"] = state.leader_epoch
    body["votedId"] = _NO_ID if state.voted_id is None else state.voted_id
    if data_version == 1:
        body["votedDirectoryId"] = to_kafka_str(state.voted_directory_id or ZERO_UUID)
    else:
        body["appliedOffset"] = 0
        body["currentVoters"] = [{"voterId": v} for v in state.current_voters]
    body["data_version"] = data_version
    return json.dumps(body, separators=(",", ":")).encode("utf-8")


def _int_field(body: dict[str, Any], name: str, *, default: int) -> int:
    value = body.get(name, default)
    # bool is an int in Python; JSON true/false is not a valid id.
    if not isinstance(value, int) or isinstance(value, bool) or not -(2**31) <= value < 2**31:
        raise ValueError(f"field {name!r} must be an int32, got {value!r}")
    return value


def _decode(raw: bytes) -> QuorumStateData:
    text = raw.decode("utf-8")
    # Kafka reads only the first line; anything after it is ignored there too.
    line = text.split("\n", 1)[0]
    if not line.strip():
        raise ValueError("file is empty")
    body = json.loads(line)
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    if "data_version" not in body:
        raise ValueError("missing field 'data_version'")
    version = body["data_version"]
    if version not in _SUPPORTED_VERSIONS or isinstance(version, bool):
        raise ValueError(f"data_version {version!r} is not one of {_SUPPORTED_VERSIONS}")
    leader_id = _int_field(body, "leaderId", default=_NO_ID)
    leader_epoch = _int_field(body, "leaderEpoch", default=_NO_ID)
    voted_id = _int_field(body, "votedId", default=_NO_ID)
    voted_directory_id: uuid.UUID | None = None
    voters: tuple[int, ...] = ()
    if version == 1:
        raw_dir = body.get("votedDirectoryId", to_kafka_str(ZERO_UUID))
        if not isinstance(raw_dir, str):
            raise ValueError(f"field 'votedDirectoryId' must be a string, got {raw_dir!r}")
        parsed = from_kafka_str(raw_dir)
        voted_directory_id = None if parsed == ZERO_UUID else parsed
    else:
        raw_voters = body.get("currentVoters") or []
        if not isinstance(raw_voters, list):
            raise ValueError(f"field 'currentVoters' must be a list, got {raw_voters!r}")
        voters = tuple(_int_field(v, "voterId", default=_NO_ID) for v in raw_voters if isinstance(v, dict))
        if len(voters) != len(raw_voters):
            raise ValueError("field 'currentVoters' must hold objects with a 'voterId'")
    return QuorumStateData(
        leader_epoch=leader_epoch,
        leader_id=None if leader_id == _NO_ID else leader_id,
        voted_id=None if voted_id == _NO_ID else voted_id,
        voted_directory_id=voted_directory_id,
        current_voters=voters,
    )


class FileQuorumStateStore:
    """Reads and durably writes `<metadata log dir>/quorum-state`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> QuorumStateData | None:
        """The stored state, or None when no file exists yet (a fresh replica).

        Raises QuorumStateError naming the file when it exists but is malformed.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return _decode(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise QuorumStateError(f"Error while reading the quorum state from the file {self.path}: {e}") from None

    def write(self, state: QuorumStateData, *, data_version: int = 1) -> None:
        """Durably replace the file: when this returns, a crash cannot bring back the old state."""
        if data_version not in _SUPPORTED_VERSIONS:
            raise ValueError(f"quorum-state data_version {data_version} is not one of {_SUPPORTED_VERSIONS}")
        if data_version == 0 and state.voted_directory_id is not None:
            raise ValueError("quorum-state data_version 0 cannot store a voted directory id")
        atomic_replace(self.path, _encode(state, data_version))

    def clear(self) -> None:
        """Delete the file and any leftover temporary file."""
        self.path.unlink(missing_ok=True)
        self.path.with_name(self.path.name + TMP_SUFFIX).unlink(missing_ok=True)
