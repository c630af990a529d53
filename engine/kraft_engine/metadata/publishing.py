"""What the loader hands to publishers: the publisher interface and the manifests of each update.

A manifest tells a publisher what it is looking at: a `LogDeltaManifest` (records from the log,
how many batches and bytes, which leader wrote them) or a `SnapshotManifest` (a whole snapshot, or
the catch-up image a newly installed publisher starts from). Elapsed times are data the caller
measured and passed in; the loader itself never reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kraft_engine.metadata.provenance import MetadataProvenance
from kraft_engine.raft import LeaderAndEpoch

if TYPE_CHECKING:
    from kraft_engine.metadata.metadata_delta import MetadataDelta
    from kraft_engine.metadata.metadata_image import MetadataImage

__all__ = ["LoaderManifest", "LogDeltaManifest", "MetadataPublisher", "SnapshotManifest"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LogDeltaManifest:
    provenance: MetadataProvenance
    leader_and_epoch: LeaderAndEpoch
    num_batches: int
    elapsed_ns: int
    num_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SnapshotManifest:
    provenance: MetadataProvenance
    elapsed_ns: int


LoaderManifest = LogDeltaManifest | SnapshotManifest


class MetadataPublisher(Protocol):
    """Receives every published image, in offset order, on the loader's (single) caller."""

    @property
    def name(self) -> str: ...

    def on_metadata_update(self, delta: MetadataDelta, *, image: MetadataImage, manifest: LoaderManifest) -> None:
        """A new image, the delta from the previous one this publisher saw, and what produced it."""

    def on_controller_change(self, leader_and_epoch: LeaderAndEpoch) -> None:
        """The quorum leader changed."""
