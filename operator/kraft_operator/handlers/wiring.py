"""The kopf wiring of the operator: thin, all decisions are the reconciler's (`kraft_operator.reconciler`).

- create, update (of the spec) and resume handlers, plus a periodic observe timer, all run the same
  reconcile of one KRaftCluster; a per-cluster lock keeps them from overlapping, and the timer
  honours the plan's "look again in" so a steady cluster is observed every ten seconds, a busy one
  every second or two;
- the status the plan returns is patched through kopf (`patch.status`), fields the plan dropped are
  removed. kopf applies that patch after the handler returns, and another handler (the timer, say)
  may already hold the body from before it: a plan made from that stale status would decide again
  what the last one decided (a second cluster id, say). So the next reconcile waits until the body
  shows the status last published; only when that never comes (the patch was refused) does it
  trust the body again, after `_STALE_GRACE_S`;
- every plan event (each action with its reason, each refusal naming the field) becomes a
  Kubernetes Event on the resource: kopf posts only explicit events, so they are posted with
  `kopf.event`;
- a finalizer: on deletion the PVCs whose volume has `deleteClaim: true` are deleted, the others
  kept (everything else is owned by the KRaftCluster and garbage-collected);
- peering: the replicas share a KopfPeering object and each starts with a random priority, so
  exactly one acts (kopf pauses every operator that sees a live peer of higher priority, and pauses
  all of them on a tie); the other takes over when the first stops or its record expires.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf

from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import GROUP, PLURAL, VERSION, KRaftCluster, KRaftClusterStatus
from kraft_operator.plan import Plan
from kraft_operator.reconciler import Reconciler
from kraft_operator.runtime.kubernetes import KubernetesRuntime

__all__ = ["FINALIZER", "OperatorState", "build_registry", "status_patch"]

FINALIZER = "kraftwerk.io/pvc-policy"
# the timer's tick: the shortest "look again" the plan asks for (it never asks for less than 1 s)
_TICK_S = 1.0
_EVENT_REPEAT_S = 300.0
# how long a published status may stay invisible in the bodies kopf hands over before the body wins
_STALE_GRACE_S = 30.0
_logger = logging.getLogger("kraft_operator.handlers")


@dataclass
class OperatorState:
    """What the handlers share: the reconciler (with its runtime), and per cluster a lock and the
    time the plan asked to be called again."""

    reconciler: Reconciler
    runtime: KubernetesRuntime
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    due_s: dict[str, float] = field(default_factory=dict)
    # per cluster: the status last published, and when
    published: dict[str, tuple[KRaftClusterStatus, float]] = field(default_factory=dict)
    # per cluster: when each distinct event was last posted (a standing refusal is posted again only
    # after _EVENT_REPEAT_S, not on every reconcile)
    posted: dict[str, dict[tuple[str, str, str], float]] = field(default_factory=dict)

    def lock(self, key: str) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())


def status_patch(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch that turns status `old` into `new`: keys the new status lacks are set to
    None at every depth (a merge patch merges nested objects; lists are replaced whole)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = (old or {}).get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = status_patch(before, value)
        else:
            patch[key] = value
    for key in old or {}:
        if key not in new:
            patch[key] = None
    return patch


def _status_of(body: kopf.Body) -> KRaftClusterStatus | None:
    raw = {k: v for k, v in body.status.items() if k != "kopf"}
    return KRaftClusterStatus.model_validate(raw) if raw else None


def _cluster(body: kopf.Body) -> KRaftCluster:
    raw = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
           # the annotations too: the plan reads kraftwerk.io/approve, pause-reconciliation and
           # manual-rolling-update from them
           "metadata": {k: v for k, v in body.metadata.items() if k in ("name", "namespace", "generation", "uid",
                                                                          "creationTimestamp", "annotations")},
           "spec": dict(body.spec)}
    status = {k: v for k, v in body.status.items() if k != "kopf"}
    if status:
        raw["status"] = status
    return KRaftCluster.model_validate(raw)


def _publish(result: Plan, *, body: kopf.Body, patch: kopf.Patch, posted: dict[tuple[str, str, str], float]) -> None:
    new = result.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    old = {k: v for k, v in body.status.items() if k != "kopf"}
    for key, value in status_patch(old, new).items():
        patch.status[key] = value
    now = time.monotonic()
    for event in result.events:
        identity = (event.type.value, event.reason, event.message)
        if now - posted.get(identity, -_EVENT_REPEAT_S) < _EVENT_REPEAT_S:
            continue
        posted[identity] = now
        kopf.event(body, type=event.type.value, reason=event.reason, message=event.message[:1024])


def build_registry(state: OperatorState) -> kopf.OperatorRegistry:
    """A registry with the operator's handlers bound to `state` (one per operator, so tests can run
    several in one process)."""
    registry = kopf.OperatorRegistry()
    resource = (GROUP, VERSION, PLURAL)

    async def reconcile(body: kopf.Body, patch: kopf.Patch, *, force: bool) -> None:
        key = f"{body.metadata.namespace}/{body.metadata.name}"
        if body.metadata.get("deletionTimestamp"):
            return
        if not force and time.monotonic() < state.due_s.get(key, 0.0):
            return
        async with state.lock(key):
            last = state.published.get(key)
            if last is not None and _status_of(body) != last[0] and time.monotonic() - last[1] < _STALE_GRACE_S:
                return  # this body predates the last publish: decide once it shows
            cluster = _cluster(body)
            result = await state.reconciler.reconcile(cluster)
            state.due_s[key] = time.monotonic() + result.requeue_after_ms / 1000
            if result.status != cluster.status:
                state.published[key] = (result.status, time.monotonic())
        _publish(result, body=body, patch=patch, posted=state.posted.setdefault(key, {}))

    @kopf.on.create(*resource, registry=registry)
    async def created(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        await reconcile(body, patch, force=True)

    @kopf.on.update(*resource, field="spec", registry=registry)
    async def updated(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        await reconcile(body, patch, force=True)

    @kopf.on.resume(*resource, registry=registry)
    async def resumed(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        await reconcile(body, patch, force=True)

    @kopf.timer(*resource, interval=_TICK_S, idle=None, registry=registry)
    async def observe(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
        await reconcile(body, patch, force=False)

    @kopf.on.delete(*resource, registry=registry)
    async def deleted(body: kopf.Body, **_: Any) -> None:
        key = f"{body.metadata.namespace}/{body.metadata.name}"
        async with state.lock(key):
            cluster = _cluster(body)
            removed = await state.runtime.delete_claims(cluster)
        state.due_s.pop(key, None)
        state.locks.pop(key, None)
        state.published.pop(key, None)
        state.posted.pop(key, None)
        kept = [f"{pool.name}/volume {volume.id}" for pool in cluster.spec.node_pools
                for volume in pool.storage.volumes if not volume.delete_claim]
        message = f"deleted PVCs: {', '.join(removed) or 'none'}; kept per deleteClaim=false: {', '.join(kept) or 'none'}"
        _logger.info("%s: %s", key, message)
        kopf.event(body, type="Normal", reason="VolumesReleased", message=message)

    return registry


def configure(settings: kopf.OperatorSettings, *, peering: str | None, clusterwide: bool,
              priority: int | None) -> None:
    """kopf settings for this operator (called at startup)."""
    settings.posting.enabled = True
    settings.posting.level = logging.INFO
    settings.persistence.finalizer = FINALIZER
    # the CRD's status schema is the operator's own; kopf keeps its bookkeeping in annotations
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kraftwerk.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kraftwerk.io", key="last-handled-configuration")
    # least privilege: a namespaced operator neither lists namespaces nor watches CRDs
    settings.scanning.disabled = not clusterwide
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    if peering is None:
        settings.peering.standalone = True
    else:
        settings.peering.name = peering
        settings.peering.mandatory = True
        settings.peering.clusterwide = clusterwide
        settings.peering.lifetime = 20
        settings.peering.stealth = True
        settings.peering.priority = priority if priority is not None else random.SystemRandom().randint(1, 2**31 - 1)


def new_state(*, runtime: KubernetesRuntime, metrics: OperatorMetrics) -> OperatorState:
    return OperatorState(reconciler=Reconciler(runtime=runtime, metrics=metrics), runtime=runtime)
