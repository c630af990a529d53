"""Controller disk replacement against the simulated cluster (`sim.py`): a voter's metadata volume
is lost; the operator opens the controller-disk-loss runbook and waits for the approval annotation
(status.operation.blockedBy names it); once approved it formats the new volume with
`--no-initial-controllers`, starts the controller as an observer, and when it has caught up swaps
the voter: RemoveRaftVoter for the old directory id, then AddRaftVoter for the new one. The
simulation checks KIP-853's rules as the operator acts, with the operator killed at every step."""

from __future__ import annotations

import random

import pytest

from kraft_operator.model import APPROVE_ANNOTATION, KRaftCluster
from kraft_operator.plan import AddVoter, FormatStorage, QuorumBootstrap, RemoveVoter

from .sim import SimCluster, bootstrap, operate, ready, reconcile

APPROVAL = "controller-disk-loss/format-observer"


def _approved(cluster: KRaftCluster) -> KRaftCluster:
    meta = cluster.metadata.model_copy(update={"annotations": {APPROVE_ANNOTATION: APPROVAL}})
    return cluster.model_copy(update={"metadata": meta})


def _replace(seed: int, *, lost: int, death_ticks: tuple[int, ...] = (), before_act: bool = True,
             ) -> tuple[SimCluster, list, list[str], str]:
    """Lose `lost`'s metadata disk, wait (unapproved) ten reconciles, approve, run until the voter set
    holds the new disk. Returns the sim, the plans, the log and the old directory id."""
    cluster, sim = bootstrap(seed)
    rng = random.Random(seed)
    old = sim.voter_dirs[lost]
    sim.lose_disk(lost)
    results, log = [], []
    for tick in range(10):
        result = reconcile(cluster, sim, rng)
        results.append(result)
        cluster = operate(cluster, sim, result, tick=tick, death=False, before_act=True, log=log)
    cluster = _approved(cluster)
    for tick in range(10, 200):
        result = reconcile(cluster, sim, rng)
        results.append(result)
        cluster = operate(cluster, sim, result, tick=tick, death=tick in death_ticks, before_act=before_act, log=log)
        if (tick > max(death_ticks, default=0) and sim.voter_dirs.get(lost) not in (None, old) and ready(result)
                and result.status.operation is None and not result.status.runbooks):
            break
    return sim, results, log, old


def test_a_lost_controller_disk_waits_for_approval_then_swaps_the_voter_once_caught_up() -> None:
    sim, results, _log, old = _replace(3, lost=1)
    assert sim.violations == [], sim.violations
    # Unapproved: the runbook is open, nothing is formatted, blockedBy names the annotation.
    waiting = results[5].status
    assert [r.name for r in waiting.runbooks] == ["controller-disk-loss"]
    assert waiting.operation is not None and waiting.operation.name == "ControllerDiskReplacement"
    assert waiting.operation.step == "await-approval"
    assert [b.kind for b in waiting.operation.blocked_by] == ["approval"]
    assert f'{APPROVE_ANNOTATION}="{APPROVAL}"' in waiting.operation.blocked_by[0].message
    assert not any(isinstance(a, FormatStorage) for r in results[:10] for a in r.actions)
    # Approved: formatted to join, then the old voter out and the new one in, in that order.
    formats = [a for r in results for a in r.actions if isinstance(a, FormatStorage)]
    assert [(f.node.node_id, f.bootstrap) for f in formats] == [(1, QuorumBootstrap.JOIN)]
    swaps = [(type(a).__name__, a.directory_id) for r in results for a in r.actions
             if isinstance(a, RemoveVoter | AddVoter)]
    new = sim.voter_dirs[1]
    assert new != old and swaps[0] == ("RemoveVoter", old) and swaps[-1] == ("AddVoter", new), swaps
    assert sorted(sim.voters) == [0, 1, 2]
    steps = [r.status.operation.step for r in results if r.status.operation is not None]
    assert "replace-disk/remove-old-voter" in steps, steps
    # The runbook closed once the voter set held the new disk.
    assert results[-1].status.runbooks == []


@pytest.mark.parametrize("before_act", [True, False], ids=["dies-before-acting", "dies-before-status-write"])
def test_the_operator_killed_at_every_step_of_a_disk_replacement_still_finishes_it(before_act: bool) -> None:
    _, clean, _, _ = _replace(4, lost=0)
    assert len(clean) > 12  # ten unapproved reconciles, then format, start, swap
    for tick in range(10, len(clean) + 2):
        sim, results, log, old = _replace(4, lost=0, death_ticks=(tick,), before_act=before_act)
        assert sim.violations == [], (tick, sim.violations, log[-20:])
        assert sim.voter_dirs.get(0) not in (None, old) and sorted(sim.voters) == [0, 1, 2], (tick, log[-20:])
        assert results[-1].status.operation is None and results[-1].status.runbooks == [], (tick, log[-20:])
