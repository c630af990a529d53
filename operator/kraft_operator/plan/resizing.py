"""Growing volumes: a volume whose spec size is above what its claim asks for is resized.

Kubernetes expands a PersistentVolumeClaim when its request grows and its StorageClass allows
expansion; the driver does the rest (online, or when the pod next starts). So the operator's part is
to raise the claim's request to the spec's size, once, and to say in status what each volume asks
for and holds (`requestedBytes` above `capacityBytes` while it grows). A shrink never gets here: the
CRD's CEL rule and `validation` refuse it. Volumes without a size (the local runtime's directories)
report no request and are never resized.

A resize is not a step the cluster waits on: a node runs on the volume it has while it grows, so
nothing else (formats, starts, a roll) is held back by one.
"""

from __future__ import annotations

from collections.abc import Sequence

from kraft_operator.plan.actions import ResizeVolume
from kraft_operator.plan.facts import Observed
from kraft_operator.plan.rendering import DesiredNode
from kraft_operator.plan.validation import parse_quantity_bytes

__all__ = ["grow_volumes"]


def grow_volumes(nodes: Sequence[DesiredNode], observed: Observed) -> list[ResizeVolume]:
    """A ResizeVolume for each existing volume whose claim asks for less than the spec's size."""
    actions: list[ResizeVolume] = []
    for node in nodes:
        facts = observed.nodes.get(node.ref.node_id)
        if facts is None:
            continue
        for volume in node.pool.storage.volumes:
            seen = facts.volume(volume.id)
            wanted = parse_quantity_bytes(volume.size)
            if seen is None or seen.requested_bytes is None or wanted is None or wanted <= seen.requested_bytes:
                continue
            actions.append(
                ResizeVolume(
                    node=node.ref,
                    implementation=node.implementation,
                    volume_id=volume.id,
                    size=volume.size,
                    reason=f"node {node.ref.node_id}: grow volume {volume.id} from {seen.requested_bytes} bytes "
                    f"to {volume.size}",
                )
            )
    return actions
