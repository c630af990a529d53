"""metadata.version finalization against the simulated cluster (`sim.py`) and the refusal of an
unsafe downgrade."""

from __future__ import annotations

import random

from kraft_engine.records import metadata_version as mv
from kraft_operator.model import ConditionType, KRaftCluster
from kraft_operator.plan import FinalizeMetadataVersion
from kraft_operator.plan.features import safe_downgrade
from kraft_operator.reconciler import _bump_failed

from .sim import bootstrap, publish, reconcile, step


def _with(cluster: KRaftCluster, **changes: object) -> KRaftCluster:
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update=changes)})


def test_an_upgrade_rolls_first_then_finalizes_once_every_node_supports_it() -> None:
    for seed in range(8):
        cluster, sim = bootstrap(seed)
        rng = random.Random(seed)
        sim.finalized = "4.0-IV3"
        for node in sim.nodes.values():
            node.supported = (7, 25)  # the old version runs up to 4.0-IV3
        sim.upgraded_support = (7, 27)  # the new one up to 4.1-IV1
        cluster = _with(cluster, version="0.2.0", metadata_version="4.1-IV1")
        for _ in range(150):
            cluster, result = step(cluster, sim, rng)
            if sim.bumps and result.status.operation is None and not result.actions:
                break
        else:
            raise AssertionError(f"seed {seed}: no bump: {result.waiting_for}")
        assert sim.violations == [] and sim.bumps == ["4.1-IV1"]
        assert result.status.metadata_version is not None and result.status.metadata_version.finalized == "4.1-IV1"
        # The simulation checked, as the operator acted, that every node had rolled, was up and
        # supported the level: the bump came after the roll, never in its middle.


def test_a_node_that_does_not_support_the_target_holds_the_bump_back_and_is_named() -> None:
    cluster, sim = bootstrap(2)
    rng = random.Random(2)
    sim.finalized = "4.0-IV3"
    sim.nodes[4].supported = (7, 25)
    cluster = _with(cluster, metadata_version="4.1-IV1")
    for _ in range(10):
        cluster, result = step(cluster, sim, rng)
        assert not any(isinstance(a, FinalizeMetadataVersion) for a in result.actions)
    assert "node 4 supports metadata.version levels 7-25" in result.waiting_for
    assert result.status.operation is not None and result.status.operation.name == "MetadataVersion"
    sim.nodes[4].supported = (7, 27)
    cluster, result = step(cluster, sim, rng)
    assert [a.version for a in result.actions if isinstance(a, FinalizeMetadataVersion)] == ["4.1-IV1"]


def test_an_unsafe_downgrade_is_refused_with_kafkas_reason_and_a_safe_one_is_sent() -> None:
    assert not safe_downgrade(mv.IBP_4_1_IV1, mv.IBP_3_3_IV3)
    assert safe_downgrade(mv.IBP_3_5_IV1, mv.IBP_3_5_IV0)
    cluster, sim = bootstrap(6)
    rng = random.Random(6)
    cluster = _with(cluster, metadata_version="3.3-IV3")
    for _ in range(3):
        cluster, result = step(cluster, sim, rng)
        assert not any(isinstance(a, FinalizeMetadataVersion) for a in result.actions)
    degraded = result.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and "might delete metadata information" in degraded.message
    assert degraded.reason == "MetadataVersionRefused"
    assert any(e.reason == "MetadataVersionRefused" for e in result.events)
    assert sim.finalized == "4.1-IV1"
    # A safe downgrade (no format change in between) is sent as such.
    sim.finalized = "3.5-IV1"
    cluster = _with(cluster, metadata_version="3.5-IV0")
    cluster, result = step(cluster, sim, rng)
    (action,) = [a for a in result.actions if isinstance(a, FinalizeMetadataVersion)]
    assert action.version == "3.5-IV0" and action.downgrade


def test_a_refused_bump_raises_the_failed_bump_runbook_until_the_target_is_finalized() -> None:
    """The controller refuses the UpdateFeatures (as it does when a registration lacks the level):
    the reconciler records Kafka's reason (`_bump_failed`, what it does on the refusal), the next
    reconcile opens the failed-metadata-version-bump runbook with it; the operator retries, and
    once the bump goes through the runbook closes and the failure is forgotten."""
    cluster, sim = bootstrap(2)
    rng = random.Random(2)
    sim.finalized = "4.0-IV3"
    cluster = _with(cluster, metadata_version="4.1-IV1")
    refusal = "UpdateFeatures: INVALID_UPDATE_VERSION: broker 5 does not support metadata.version 27"
    events = []
    for _ in range(3):
        result = reconcile(cluster, sim, rng)
        events += result.events
        (action,) = [a for a in result.actions if isinstance(a, FinalizeMetadataVersion)]
        result = _bump_failed(result, action, reason=refusal, now_ms=sim.now_ms)
        cluster = publish(cluster, result)
        sim.tick()
    result = reconcile(cluster, sim, rng)
    book = next(r for r in result.status.runbooks if r.name == "failed-metadata-version-bump")
    assert refusal in book.evidence[0] and "finalized 4.0-IV3, target 4.1-IV1" in book.evidence
    assert result.status.metadata_version is not None and refusal in (result.status.metadata_version.failed_bump or "")
    assert [e.reason for e in events].count("RunbookOpened") == 1  # opened once, after the first refusal
    assert [a.version for a in result.actions if isinstance(a, FinalizeMetadataVersion)] == ["4.1-IV1"]  # retried
    cluster = publish(cluster, result)
    for action in result.actions:
        sim.apply(action)  # this time the controller takes it
    sim.tick()
    cluster, result = step(cluster, sim, rng)
    assert sim.finalized == "4.1-IV1"
    assert not any(r.name == "failed-metadata-version-bump" for r in result.status.runbooks)
    assert result.status.metadata_version is not None and result.status.metadata_version.failed_bump is None
    assert any(e.reason == "RunbookClosed" and "failed-metadata-version-bump" in e.message for e in result.events)
