"""KIP-853 controller scale-up against the simulated cluster (`sim.py`): a controller added to the
spec is formatted `--no-initial-controllers`, runs as an observer, and joins the voters with
AddRaftVoter once caught up, one at a time, never while a voter lags."""

from __future__ import annotations

import random

from kraft_operator.model import KRaftCluster
from kraft_operator.plan import AddVoter, FormatStorage, QuorumBootstrap, StartNode

from .sim import bootstrap, step


def _scaled(cluster: KRaftCluster, controllers: int) -> KRaftCluster:
    pools = list(cluster.spec.node_pools)
    pools[0] = pools[0].model_copy(update={"replicas": controllers})
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})


def test_controllers_three_to_five_join_one_at_a_time_once_caught_up() -> None:
    for seed in range(12):
        cluster, sim = bootstrap(seed)
        rng = random.Random(seed)
        cluster = _scaled(cluster, 5)
        formats, adds, steps = [], [], []
        for _ in range(150):
            cluster, result = step(cluster, sim, rng)
            formats += [a for a in result.actions if isinstance(a, FormatStorage)]
            adds += [a for a in result.actions if isinstance(a, AddVoter)]
            if result.status.operation is not None:
                steps.append(result.status.operation.name + "/" + result.status.operation.step)
            if len(sim.voters) == 5 and result.status.operation is None and not result.actions:
                break
        else:
            raise AssertionError(f"seed {seed}: voters {sim.voters}; last steps {steps[-5:]}: {result.waiting_for}")
        assert sim.violations == [], sim.violations
        new = sorted(n.node_id for n in sim.nodes.values() if n.controller and n.node_id not in (0, 1, 2))
        assert {f.node.node_id: f.bootstrap for f in formats if f.node.node_id in new} == dict.fromkeys(
            new, QuorumBootstrap.JOIN)
        assert [a.node.node_id for a in adds] == new == sim.voter_changes
        assert "QuorumChange/add-voter" in steps
        quorum = result.status.quorum
        assert quorum is not None and sorted(v.id for v in quorum.voters) == sorted(sim.voters)


def test_a_lagging_voter_holds_the_addition_back_and_a_broken_check_is_caught(monkeypatch) -> None:
    cluster, sim = bootstrap(3)
    rng = random.Random(3)
    cluster = _scaled(cluster, 4)
    for _ in range(40):
        cluster, result = step(cluster, sim, rng)
        if any(isinstance(a, StartNode) for a in result.actions):
            break  # the new controller starts (no roll precedes it); the addition comes next
    # A follower (a leader is caught up by definition) falls behind (a slow disk) just as the new
    # controller may join.
    slow = min(v for v in sim.voters if v != sim.leader)
    sim.nodes[slow].recover_left = 12
    sim.nodes[slow].caught_up_at_ms -= 10_000
    held = False
    for _ in range(60):
        cluster, result = step(cluster, sim, rng)
        held = held or f"voter(s) [{slow}] to catch up before controller" in result.waiting_for
        if len(sim.voters) == 4:
            break
    assert held and sim.violations == [] and len(sim.voters) == 4

    # The same run with the voters' check removed from the plan adds while voter 1 is down.
    import kraft_operator.plan.quorum_change as quorum_change

    real = quorum_change.voter_caught_up
    monkeypatch.setattr(quorum_change, "voter_caught_up",
                        lambda replica, **kw: True if "since_ms" not in kw else real(replica, **kw))
    cluster, sim = bootstrap(3)
    cluster = _scaled(cluster, 4)
    rng = random.Random(3)
    for _ in range(40):
        cluster, result = step(cluster, sim, rng)
        if any(isinstance(a, StartNode) for a in result.actions):
            break  # the new controller starts (no roll precedes it); the addition comes next
    slow = min(v for v in sim.voters if v != sim.leader)
    sim.nodes[slow].recover_left = 12
    sim.nodes[slow].caught_up_at_ms -= 10_000
    for _ in range(60):
        cluster, result = step(cluster, sim, rng)
        if len(sim.voters) == 4:
            break
    assert any(f"while voters [{slow}] lag" in v for v in sim.violations), sim.violations
