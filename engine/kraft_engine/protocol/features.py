"""What ApiVersions says about feature flags, supplied by whoever owns them.

The wire layer does not know the features; the controller (and the broker's metadata cache) do,
and they change at runtime. A listener therefore asks a `FeaturesProvider` callback at the moment
it answers each ApiVersions request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = ["Features", "FeaturesProvider", "NO_FEATURES"]


@dataclass(frozen=True, slots=True)
class Features:
    """Feature flags as advertised in an ApiVersions response.

    `supported` maps a feature name to the (min, max) versions this node's software supports.
    `finalized` maps a feature name to its cluster-wide finalized level (Kafka advertises a
    finalized feature as min level = max level = that level). `finalized_epoch` is the offset of
    the metadata record that finalized them, or -1 while unknown.
    """

    supported: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    finalized: Mapping[str, int] = field(default_factory=dict)
    finalized_epoch: int = -1


NO_FEATURES = Features()

FeaturesProvider = Callable[[], Features]
