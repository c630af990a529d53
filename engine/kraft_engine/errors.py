"""The engine's one rooted exception hierarchy.

Every error the engine raises on purpose derives from `KraftError`, through the base of the layer
that raises it: `RecordsError`, `StorageError`, `KafkaProtocolError` (in `protocol.errors`, the
wire layer's base), `RaftError`, `MetadataError`, `ControllerError`, `BrokerError`, `AdminError`,
`ServerError`, `SimulationError`. A caller catches one layer's refusals, or all of the engine's,
in one place. Errors that were a `ValueError` or `RuntimeError` before stay one as well, so code
catching those keeps working. Broken invariants are `invariant.InvariantViolation`, not part of this
tree: they are bugs, never an answer to a caller.

`SnapshotError` is both a `StorageError` and a `RaftError`: a snapshot file that is malformed
(storage) and a snapshot the raft log cannot take (an offset not committed, not on a batch
boundary) are one concept, raised by both layers.

A leaf module (it imports nothing), so every layer, the pure cores included, can use it.
"""

from __future__ import annotations

__all__ = [
    "AdminError",
    "BrokerError",
    "ControllerError",
    "KraftError",
    "MetadataError",
    "RaftError",
    "RecordsError",
    "ServerError",
    "SimulationError",
    "SnapshotError",
    "StorageError",
]


class KraftError(Exception):
    """The root of every error the engine raises on purpose."""


class RecordsError(KraftError):
    """Record batches and metadata records that cannot be read or written."""


class StorageError(KraftError):
    """Logs, snapshots, checkpoints and the files of a node's directories."""


class RaftError(KraftError):
    """The consensus core's refusals: a request that is wrong now (stale epoch, full buffer); the
    node's state is untouched."""


class SnapshotError(StorageError, RaftError):
    """A snapshot that cannot be taken, stored or read (not committed, not on a batch boundary,
    malformed, already frozen...)."""


class MetadataError(KraftError):
    """Metadata that cannot be replayed into an image or written in the finalized version."""


class ControllerError(KraftError):
    """The quorum controller's refusals and failed appends."""


class BrokerError(KraftError):
    """The broker's refusals (a produce the log must not take, producer state)."""


class AdminError(KraftError):
    """The admin clients: an answer that says the operation failed."""


class ServerError(KraftError):
    """One node process: configuration, startup, a fatal fault, a stopped component."""


class SimulationError(KraftError):
    """The deterministic simulation: a violated invariant, a failed run, a bad transcript."""
