"""The errors the metadata image raises when the log says something it cannot apply.

A committed record that does not fit the image (a partition change for a topic that does not
exist, a fence for a broker at the wrong epoch, a record type this engine does not know) is not
something to skip: every node must build the same image from the same log, so replay stops and
names the record. Callers treat these as fatal faults, like Kafka's metadata-loading fault handler.
"""

from __future__ import annotations

from kraft_engine.errors import MetadataError

__all__ = ["MetadataReplayError", "UnwritableMetadataError"]


class MetadataReplayError(MetadataError, RuntimeError):
    """A record could not be replayed into a `MetadataDelta`: unknown type, or invalid for the image."""


class UnwritableMetadataError(MetadataError, RuntimeError):
    """The image holds state that the requested metadata.version cannot represent in records."""
