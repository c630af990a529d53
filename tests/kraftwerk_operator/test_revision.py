"""One roll per controller change, or none: a KIP-853 controller change rewrites every node's
`controller.quorum.bootstrap.servers`, and a running node restarts for that only once the list it
started with reaches fewer than a majority of the cluster's controllers (`plan.roll.revision_change`).
Controllers 3 -> 5 -> 3 and a broker drained on the simulated cluster restart no node; the rule
that compared whole revisions (the old one) restarts them, and the test catches it."""

from __future__ import annotations

import pytest

import kraft_operator.plan.roll as roll_module
from kraft_operator.plan import node_revision, revision_change

from .sim import ScaleScenario

BASE = {"process.roles": "broker", "node.id": "4", "log.dirs": "/data/4/0"}


def _revision(servers: str, **changes: str) -> str:
    return node_revision({**BASE, **changes, "controller.quorum.bootstrap.servers": servers}, image="i", version="v")


def test_a_config_image_or_version_change_still_restarts() -> None:
    started = _revision("a:1,b:1,c:1")
    assert revision_change(started, started) is None
    assert revision_change(started, _revision("a:1,b:1,c:1", **{"num.io.threads": "16"})) is not None
    moved = node_revision({**BASE, "controller.quorum.bootstrap.servers": "a:1,b:1,c:1"}, image="j", version="v")
    assert revision_change(started, moved) is not None


@pytest.mark.parametrize(("started", "target", "restart"), [
    ("a:1,b:1,c:1", "a:1,b:1,c:1,d:1,e:1", False),  # 3 -> 5: three of five is a majority
    ("a:1,b:1,c:1", "a:1,b:1,c:1,d:1", False),  # 3 -> 4: three of four
    ("a:1,b:1,c:1,d:1,e:1", "a:1,b:1,c:1", False),  # 5 -> 3: extra entries are harmless
    ("a:1,b:1,c:1", "a:1,b:1", False),  # 3 -> 2
    ("a:1,b:1,c:1", "a:1,d:1,e:1,f:1", True),  # one of four: no majority left
    ("a:1,b:1", "a:1,b:1,c:1,d:1", True),  # two of four is not a majority
    ("a:1", "b:1", True),
])
def test_a_bootstrap_list_change_restarts_only_below_a_majority(started: str, target: str, restart: bool) -> None:
    reason = revision_change(_revision(started), _revision(target))
    assert (reason is not None) == restart, reason
    if restart:
        assert "controller.quorum.bootstrap.servers" in (reason or "")


def test_a_revision_recorded_before_the_split_restarts_once() -> None:
    assert revision_change("0123456789abcdef", _revision("a:1")) is not None


def test_controllers_three_to_five_to_three_restart_no_node() -> None:
    scenario = ScaleScenario(seed=4)
    violations, finished = scenario.run()
    assert violations == [] and finished, "\n".join(scenario.log[-30:])
    assert scenario.sim is not None and scenario.sim.restarts == []


def test_comparing_whole_revisions_is_caught_restarting_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    def whole(started: str, target: str) -> str | None:
        return None if started == target else "differs"

    monkeypatch.setattr(roll_module, "revision_change", whole)
    scenario = ScaleScenario(seed=4)
    scenario.run()
    assert scenario.sim is not None
    restarted = {node_id for node_id, _ in scenario.sim.restarts}
    assert {0, 1, 2, 3, 4, 5} <= restarted  # every staying node rolled for its new bootstrap servers
