"""Runbooks in status and their docs pages, and the pause annotation, against the simulated
cluster (`sim.py`) driven by the real planner."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

from kraft_operator.model import PAUSE_ANNOTATION, ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.plan import Observed, PodPhase, RestartNode, plan
from kraft_operator.plan.runbooks import RUNBOOKS, render_index, render_page

from .sim import LAYOUT, RULES, bootstrap, publish, step, target_revisions

DOCS = Path(__file__).resolve().parents[2] / "docs" / "runbooks"


def test_every_runbook_has_its_generated_docs_page_and_no_other_page_exists() -> None:
    for definition in RUNBOOKS:
        page = DOCS / f"{definition.name}.md"
        assert page.exists(), f"{page} is missing: run scripts/gen-runbook-docs"
        assert page.read_text(encoding="utf-8") == render_page(definition), f"{page} is stale: run scripts/gen-runbook-docs"
    assert (DOCS / "README.md").read_text(encoding="utf-8") == render_index()
    assert {p.stem for p in DOCS.glob("*.md")} == {d.name for d in RUNBOOKS} | {"README"}


def test_steps_that_can_lose_data_or_quorum_are_never_automated() -> None:
    dangerous = [(d.name, s.id) for d in RUNBOOKS for s in d.steps if s.dangerous]
    assert ("quorum-loss", "reform-from-survivor") in dangerous
    assert ("stuck-roll", "unclean-election") in dangerous
    assert ("broker-disk-loss", "replace-volume") in dangerous
    for definition in RUNBOOKS:
        for s in definition.steps:
            assert not (s.dangerous and s.mode == "automated"), (definition.name, s.id)
    names = [d.name for d in RUNBOOKS]
    assert names == ["quorum-loss", "controller-disk-loss", "broker-disk-loss", "stuck-roll",
                     "failed-metadata-version-bump", "broker-cannot-register"]


def test_quorum_loss_opens_a_runbook_naming_the_down_voters_and_closes_when_they_return() -> None:
    cluster, sim = bootstrap(8)
    rng = random.Random(0)
    survivor = 0
    for node_id in (1, 2):
        sim.crash(node_id, crash_loops=6)  # each start fails six more times, then it comes back
    seen_open = []
    events = []
    for _ in range(30):
        cluster, result = step(cluster, sim, rng)
        events += result.events
        opened = [r for r in result.status.runbooks if r.name == "quorum-loss"]
        if opened:
            seen_open.append(opened[0])
        elif seen_open:
            break
    assert seen_open, "no quorum-loss runbook opened"
    first = seen_open[0]
    assert "voters [0, 1, 2]; down: 1 (Failed), 2 (Failed)" in first.evidence[0]
    assert "1 of 3 voters run; a majority is 2" in first.evidence[1]
    assert all(r.detected_at == first.detected_at for r in seen_open), "detectedAt must stay the first detection's"
    steps = {s.id: s for s in first.steps}
    assert steps["restart-voters"].mode == "automated" and steps["restart-voters"].state == "pending"
    assert steps["reform-from-survivor"].dangerous and steps["reform-from-survivor"].mode == "manual"
    assert any("kraft metadata-quorum --bootstrap-controller n0.test:9093,n1.test:9093,n2.test:9093 describe --status"
               in c for c in first.commands)
    assert any(c == f"kubectl logs -n ns demo-controllers-{survivor} --tail=100" for c in first.commands)
    assert first.docs == "docs/runbooks/quorum-loss.md"
    # It closed once the voters came back and a leader was elected.
    assert result.status.runbooks == [] and sim.leader >= 0
    reasons = [e.reason for e in events]
    assert reasons.count("RunbookOpened") == 1 and reasons.count("RunbookClosed") == 1
    assert reasons.index("RunbookOpened") < reasons.index("RunbookClosed")


def test_quorum_loss_stays_open_while_crash_looping_voters_show_running_between_restarts() -> None:
    """Voters that crash-loop are running for a moment after each restart (a process that has not
    failed yet): with no leader observed the runbook stays open, its detection time kept, and it
    never closes and reopens. Only a leader closes it."""
    cluster, sim = bootstrap(8)
    rng = random.Random(0)
    for node_id in (1, 2):
        sim.crash(node_id, crash_loops=1000)
    for _ in range(30):
        cluster, result = step(cluster, sim, rng)
        if any(r.name == "quorum-loss" for r in result.status.runbooks):
            break
    else:
        raise AssertionError("no quorum-loss runbook opened")
    opened = next(r for r in result.status.runbooks if r.name == "quorum-loss")
    events = []
    for _ in range(5):
        observed = sim.observe(cluster)
        flicker = replace(observed, nodes={i: replace(f, phase=PodPhase.RUNNING, ready=True) if i in (1, 2) else f
                                           for i, f in observed.nodes.items()})
        result = plan(cluster, observed=flicker, layout=LAYOUT, rules=RULES, rng=rng, now_ms=sim.now_ms)
        cluster = publish(cluster, result)
        events += [e.reason for e in result.events]
        books = [r for r in result.status.runbooks if r.name == "quorum-loss"]
        assert books and books[0].detected_at == opened.detected_at, result.status.runbooks
        assert "down: none now (they run, and elect no leader)" in books[0].evidence[0]
        sim.tick()
    assert "RunbookClosed" not in events and "RunbookOpened" not in events


def test_a_lost_controller_volume_opens_the_controller_disk_loss_runbook() -> None:
    cluster, sim = bootstrap(9)
    rng = random.Random(0)
    recorded = cluster.status.node(2).directories[0].directory_id if cluster.status else None
    sim.nodes[2].volumes.clear()
    sim.crash(2)
    cluster, result = step(cluster, sim, rng)
    books = {r.name: r for r in result.status.runbooks}
    assert "controller-disk-loss" in books and "broker-disk-loss" not in books
    book = books["controller-disk-loss"]
    assert book.evidence == [f"node 2 volume 0 (/data/2/0): directory id {recorded} recorded, the volume is now missing"]
    assert any(f"remove-controller --controller-id 2 --controller-directory-id {recorded}" in c for c in book.commands)
    assert not any(isinstance(a, RestartNode) for a in result.actions)


def test_a_roll_blocked_longer_than_configured_raises_the_stuck_roll_runbook() -> None:
    cluster, sim = bootstrap(21)
    rng = random.Random(0)
    held = sim.partitions[0]
    held.min_isr = 3
    lifecycle = cluster.spec.lifecycle.model_copy(update={"stuck_roll_after_seconds": 10})
    spec = cluster.spec.model_copy(update={"config": {"log.retention.hours": "3"}, "lifecycle": lifecycle})
    cluster = cluster.model_copy(update={"spec": spec})
    blocked_at = None
    for tick in range(80):
        cluster, result = step(cluster, sim, rng)
        operation = result.status.operation
        if operation is not None and operation.step == "blocked" and blocked_at is None:
            blocked_at = tick
        if result.status.runbooks:
            break
    assert blocked_at is not None
    assert tick - blocked_at >= 10, "raised before the configured time"
    (book,) = result.status.runbooks
    assert book.name == "stuck-roll"
    assert any(f"{held.topic}-{held.partition} would drop below min.insync.replicas=3" in e for e in book.evidence)
    assert book.steps[0].state == "done"  # keep-checking: it never gives up
    held.min_isr = 2
    for _ in range(80):
        cluster, result = step(cluster, sim, rng)
        if result.status.operation is None:
            break
    assert result.status.runbooks == [] and sim.violations == []


def test_the_stuck_roll_runbook_stays_open_while_a_broker_crash_loops() -> None:
    """A crash-looping broker is started again by the bootstrap at every reconcile; the roll, held
    at min ISR, is no less stuck for it: its runbook stays open (not closed and reopened)."""
    cluster, sim = bootstrap(21)
    rng = random.Random(0)
    sim.partitions[0].min_isr = 3
    lifecycle = cluster.spec.lifecycle.model_copy(update={"stuck_roll_after_seconds": 10})
    spec = cluster.spec.model_copy(update={"config": {"log.retention.hours": "3"}, "lifecycle": lifecycle})
    cluster = cluster.model_copy(update={"spec": spec})
    for _ in range(80):
        cluster, result = step(cluster, sim, rng)
        if result.status.runbooks:
            break
    assert [r.name for r in result.status.runbooks] == ["stuck-roll"]
    detected = result.status.runbooks[0].detected_at
    sim.crash(5, crash_loops=1000)
    reasons = []
    for _ in range(10):
        cluster, result = step(cluster, sim, rng)
        reasons += [e.reason for e in result.events]
        books = [r for r in result.status.runbooks if r.name == "stuck-roll"]
        assert books and books[0].detected_at == detected, result.status.runbooks
    assert "StartNode" in reasons and "RunbookClosed" not in reasons


def test_a_broker_refused_for_its_cluster_id_opens_broker_cannot_register() -> None:
    cluster, sim = bootstrap(4)
    rng = random.Random(0)
    sim.crash(5, crash_loops=100)
    observe = sim.observe

    def with_message(c: KRaftCluster) -> Observed:
        observed = observe(c)
        nodes = dict(observed.nodes)
        nodes[5] = replace(nodes[5], message="InconsistentClusterIdException: the cluster id in meta.properties differs")
        return replace(observed, nodes=nodes)

    sim.observe = with_message  # type: ignore[method-assign]
    cluster, result = step(cluster, sim, rng)
    books = {r.name: r for r in result.status.runbooks}
    assert "broker-cannot-register" in books
    assert books["broker-cannot-register"].evidence[0].startswith("broker 5 exited: InconsistentClusterIdException")


def test_the_pause_annotation_stops_every_action_keeps_observing_and_the_roll_resumes() -> None:
    cluster, sim = bootstrap(13)
    rng = random.Random(0)
    cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"config": {"log.retention.hours": "4"}})})
    for _ in range(4):  # the roll starts: configs written, a first node recorded and restarted
        cluster, result = step(cluster, sim, rng)
    roll_before = result.status.operation.roll if result.status.operation else None
    assert roll_before is not None
    paused = cluster.metadata.model_copy(update={"annotations": {PAUSE_ANNOTATION: "true"}})
    cluster = cluster.model_copy(update={"metadata": paused})
    sim.crash(4)  # even a crashed broker is left alone while paused
    for _ in range(12):
        cluster, result = step(cluster, sim, rng)
        assert result.actions == ()
    condition = result.status.condition(ConditionType.PAUSED)
    assert condition is not None and condition.status is ConditionStatus.TRUE
    assert result.status.operation is not None and result.status.operation.step == "paused"
    assert result.status.operation.roll == roll_before or result.status.operation.roll.current == roll_before.current
    assert result.status.quorum is not None and result.status.brokers == "2/3"  # still observing
    cluster = cluster.model_copy(update={"metadata": cluster.metadata.model_copy(update={"annotations": {}})})
    for _ in range(120):
        cluster, result = step(cluster, sim, rng)
        if result.status.operation is None and result.status.condition(ConditionType.READY).status is ConditionStatus.TRUE:
            break
    else:
        raise AssertionError("the roll did not resume and finish after the pause")
    assert sim.violations == []
    targets = target_revisions(cluster)
    assert all(n.revision == targets[i] for i, n in sim.nodes.items())
