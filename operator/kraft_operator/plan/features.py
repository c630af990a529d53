"""metadata.version finalization: once every node runs a version that supports the target, the
operator finalizes it through UpdateFeatures.

- The target is `spec.metadataVersion`, or, when unset, the newest production level that every
  node supports (each node's ApiVersions `supported_features`) and every pool's implementation
  runs in production.
- A bump waits while any node does not support the target (status names the node and its range),
  while a node's range is unknown, and while any other operation (a roll, a voter change, the
  bootstrap) is under way: a version is never bumped in the middle of a roll.
- A downgrade is refused in status with Kafka's reason, unless it is a safe one (no level between
  the two changed the metadata format, Kafka's `MetadataVersion.checkIfMetadataChanged`); a safe
  one is sent as a SAFE_DOWNGRADE.
- Only metadata.version is ever sent: kraft.version never moves as a side effect (KAFKA-21426).

Not here yet: the stale-registration check (registered brokers or controllers no longer in the
cluster, which block Kafka's bump: KAFKA-20395) and their unregistration on approval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kraft_engine.records import metadata_version as mv
from kraft_operator.model import KRaftClusterSpec
from kraft_operator.plan.actions import Event, EventType, FinalizeMetadataVersion
from kraft_operator.plan.facts import Observed
from kraft_operator.plan.rendering import DesiredNode
from kraft_operator.plan.validation import LATEST_PRODUCTION

__all__ = ["MetadataVersionDecision", "plan_metadata_version", "safe_downgrade"]


@dataclass(frozen=True, slots=True)
class MetadataVersionDecision:
    actions: tuple[FinalizeMetadataVersion, ...] = ()
    events: tuple[Event, ...] = ()
    waiting: str = ""
    refused: str = ""
    target: str | None = None


def safe_downgrade(current: mv.MetadataVersion, target: mv.MetadataVersion) -> bool:
    """Kafka's rule: a downgrade is safe when no level above the target, up to the current one,
    changed the metadata format."""
    return not any(target < v <= current and v.did_metadata_change for v in mv.METADATA_VERSIONS)


def plan_metadata_version(
    *, spec: KRaftClusterSpec, nodes: Sequence[DesiredNode], observed: Observed, busy: bool
) -> MetadataVersionDecision:
    """The metadata.version step for this reconcile (see the module docstring)."""
    cluster = observed.cluster
    if cluster is None or cluster.finalized_metadata_version is None or cluster.supported_metadata_versions is None:
        return MetadataVersionDecision()
    current = mv.from_version_string(cluster.finalized_metadata_version)
    supported = cluster.supported_metadata_versions
    unknown = sorted(n.ref.node_id for n in nodes if n.ref.node_id not in supported)
    if spec.metadata_version is not None:
        target = mv.from_version_string(spec.metadata_version)
    else:
        if unknown:
            return MetadataVersionDecision()
        ceiling = min(LATEST_PRODUCTION[p.implementation] for p in spec.node_pools)
        levels = [supported[n.ref.node_id][1] for n in nodes]
        newest = min([*levels, ceiling.feature_level])
        target = max((v for v in mv.METADATA_VERSIONS if v.feature_level <= newest), default=current)
        target = max(target, current)  # "latest supported" never means a downgrade
    if target == current:
        return MetadataVersionDecision(target=str(target))
    downgrade = target < current
    if downgrade and not safe_downgrade(current, target):
        why = (f"metadata.version {current} -> {target} refused: Refusing to perform the requested downgrade "
               "because it might delete metadata information (a level in between changed the metadata format)")
        return MetadataVersionDecision(refused=why, target=str(target),
                                       events=(Event(EventType.WARNING, "MetadataVersionRefused", why),))
    holdouts = [
        f"node {n.ref.node_id} supports metadata.version levels {supported[n.ref.node_id][0]}-{supported[n.ref.node_id][1]}"
        for n in nodes
        if n.ref.node_id in supported
        and not supported[n.ref.node_id][0] <= target.feature_level <= supported[n.ref.node_id][1]
    ]
    if unknown or holdouts:
        parts = holdouts + ([f"node(s) {unknown} not asked yet"] if unknown else [])
        return MetadataVersionDecision(target=str(target),
                                       waiting=f"metadata.version {target} is held back: " + "; ".join(parts))
    if busy:
        return MetadataVersionDecision(target=str(target),
                                       waiting=f"metadata.version {target} waits for the operation under way to finish")
    action = FinalizeMetadataVersion(
        level=target.feature_level, version=str(target), downgrade=downgrade,
        reason=f"UpdateFeatures metadata.version {current} -> {target}"
        + (" (a safe downgrade)" if downgrade else "") + ": every node supports it",
    )
    return MetadataVersionDecision(actions=(action,), target=str(target),
                                   events=(Event(EventType.NORMAL, "FinalizeMetadataVersion", action.reason),),
                                   waiting=f"metadata.version {target} to be finalized")
