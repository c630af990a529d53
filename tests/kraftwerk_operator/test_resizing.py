"""Growing volumes: a larger spec size becomes a ResizeVolume of exactly the volumes that ask for
less, and the status says what each volume asks for and holds."""

from __future__ import annotations

import random
from dataclasses import replace

from kraft_operator.plan import ResizeVolume

from .builders import WITH_BROKERS, cluster_from
from .test_plan import step, until_ready
from .world import World

GIB = 2**30


def _sized(world: World, *, requested_bytes: int, capacity_bytes: int) -> None:
    """The brokers' volumes as a Kubernetes runtime reports PVCs: a request and a capacity (the
    controllers' volumes report none)."""
    for node in world.nodes.values():
        if node.pool != "brokers":
            continue
        for volume_id, volume in node.volumes.items():
            node.volumes[volume_id] = replace(volume, requested_bytes=requested_bytes, size_bytes=capacity_bytes)


def _with_broker_size(cluster, size: str):
    pools = list(cluster.spec.node_pools)
    storage = pools[1].storage.model_copy(
        update={"volumes": [v.model_copy(update={"size": size}) for v in pools[1].storage.volumes]})
    pools[1] = pools[1].model_copy(update={"storage": storage})
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})


def test_a_grown_volume_is_resized_once_and_status_shows_request_and_capacity(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(WITH_BROKERS.replace("implementation: apache-kafka", "")), world,
                             rules=rules)
    _sized(world, requested_bytes=10 * GIB, capacity_bytes=10 * GIB)
    cluster, result = step(cluster, world, rules=rules)
    assert not [a for a in result.actions if isinstance(a, ResizeVolume)]  # same size: nothing to do

    grown = _with_broker_size(cluster, "12Gi")
    _, result = step(grown, world, rules=rules, apply=False)
    resizes = [a for a in result.actions if isinstance(a, ResizeVolume)]
    assert sorted((a.node.node_id, a.volume_id, a.size) for a in resizes) == [
        (node_id, volume_id, "12Gi") for node_id in (3, 4, 5) for volume_id in (0, 1)
    ]
    assert "ResizeVolume" in {e.reason for e in result.events}
    assert "node 3: grow volume 0 from 10737418240 bytes to 12Gi" in {a.reason for a in resizes}

    # the claims now ask for 12Gi; the driver has not grown them yet: status says so, no second resize
    _sized(world, requested_bytes=12 * GIB, capacity_bytes=10 * GIB)
    _, result = step(grown, world, rules=rules)
    assert not [a for a in result.actions if isinstance(a, ResizeVolume)]
    broker = result.status.node(3)
    assert broker is not None
    assert [(d.requested_bytes, d.capacity_bytes) for d in broker.directories] == [(12 * GIB, 10 * GIB)] * 2
    controller = result.status.node(0)
    assert controller is not None and controller.directories[0].requested_bytes is None


def test_paused_or_sizeless_volumes_are_never_resized(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(WITH_BROKERS.replace("implementation: apache-kafka", "")), world,
                             rules=rules)
    # volumes that report no request (the local runtime's directories): nothing to grow
    _, result = step(_with_broker_size(cluster, "20Gi"), world, rules=rules, apply=False)
    assert not [a for a in result.actions if isinstance(a, ResizeVolume)]
    _sized(world, requested_bytes=10 * GIB, capacity_bytes=10 * GIB)
    paused = _with_broker_size(cluster, "20Gi")
    paused = paused.model_copy(update={"spec": paused.spec.model_copy(update={"paused": True})})
    _, result = step(paused, world, rules=rules, apply=False)
    assert result.actions == ()
