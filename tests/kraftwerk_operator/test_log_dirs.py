"""JBOD log directories added to and removed from running brokers (`plan/log_dirs.py`): the pure
move planner and the directories a broker keeps, as invariants over many random worlds, and the
planner's steps against the simulated world of `world.py`; and a broker halted by its failed
metadata volume, detected from its exit."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kraft_operator.config_rules import EngineConfigRules
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.plan import (
    LOG_DIR_REMOVAL_OPERATION,
    AlterReplicaLogDirs,
    FormatStorage,
    LogDirFacts,
    LogDirReplica,
    NodeFacts,
    Observed,
    Plan,
    PodPhase,
    RestartNode,
    WriteConfig,
    plan,
    plan_log_dir_moves,
)
from kraft_operator.plan import planning as planning_module
from kraft_operator.plan.rendering import desired_nodes

from .builders import WITH_BROKERS, FixedLayout, cluster_from
from .world import World, publish

NOW_MS = 1_700_000_000_000
BROKERS = (3, 4, 5)
SETTINGS = settings(max_examples=500, derandomize=True, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# -- the move planner -------------------------------------------------------------------------------

def _replicas(topic_count: int) -> st.SearchStrategy[list[LogDirReplica]]:
    one = st.builds(LogDirReplica, topic=st.sampled_from([f"t{i}" for i in range(topic_count)]),
                    partition=st.integers(0, 5), size_bytes=st.integers(0, 5000), future=st.booleans())
    return st.lists(one, max_size=12, unique_by=lambda r: (r.topic, r.partition, r.future))


@st.composite
def _move_worlds(draw: st.DrawFn) -> tuple[LogDirFacts, tuple[LogDirFacts, ...]]:
    leaving = LogDirFacts("/data/leaving", usable_bytes=draw(st.integers(-1, 10_000)),
                          replicas=tuple(r for r in draw(_replicas(3)) if not r.future))
    staying = []
    for i in range(draw(st.integers(0, 3))):
        # a staying directory may already hold the future copy of a leaving replica
        futures = tuple(LogDirReplica(r.topic, r.partition, r.size_bytes // 2, True) for r in leaving.replicas
                        if draw(st.booleans()) and i == 0)
        staying.append(LogDirFacts(f"/data/s{i}", usable_bytes=draw(st.integers(-1, 20_000)),
                                   replicas=futures + tuple(r for r in draw(_replicas(2)) if not r.future)))
    return leaving, tuple(staying)


@SETTINGS
@given(_move_worlds())
def test_every_replica_of_a_leaving_directory_is_moved_to_a_staying_one_with_room_or_refused(world) -> None:
    leaving, staying = world
    result = plan_log_dir_moves(leaving, staying)
    current = {(r.topic, r.partition): r for r in leaving.replicas if not r.future}
    moved = {(m.topic, m.partition): m for m in result.moves}
    # every replica exactly once: moved, or named in a refusal; nothing else moved
    assert set(moved) <= set(current)
    for key in current:
        named = any(f"{key[0]}-{key[1]} " in reason for reason in result.refused)
        assert (key in moved) != named, (key, result)
    targets = {d.path for d in staying}
    assert all(m.log_dir in targets for m in result.moves)  # never the leaving one, never a stranger
    if not staying:
        assert not result.moves and len(result.refused) == len(current)
    # a copy under way keeps its destination
    futures = {(r.topic, r.partition): d.path for d in staying for r in d.replicas if r.future}
    assert all(moved[k].log_dir == futures[k] for k in moved if k in futures)
    # the new copies fit where the room is known
    for d in staying:
        if d.usable_bytes < 0:
            continue
        new = sum(current[(m.topic, m.partition)].size_bytes for m in result.moves
                  if m.log_dir == d.path and (m.topic, m.partition) not in futures)
        assert new <= d.usable_bytes, (d, result)
    # and nothing is refused for room when all of it fits in the roomiest directory
    known = [d.usable_bytes for d in staying if d.usable_bytes >= 0]
    pending = sum(r.size_bytes for k, r in current.items() if k not in futures)
    if staying and (len(known) < len(staying) or pending <= max(known)):
        assert not result.refused, result


def test_a_directory_of_unknown_room_takes_what_no_known_one_fits() -> None:
    """Found by the property above: a full directory (0 bytes usable) must not shadow one whose
    room the broker did not report."""
    leaving = LogDirFacts("/data/leaving", replicas=(LogDirReplica("t0", 0, 1),))
    staying = (LogDirFacts("/data/s0", usable_bytes=0), LogDirFacts("/data/s1", usable_bytes=-1))
    result = plan_log_dir_moves(leaving, staying)
    assert [(m.topic, m.partition, m.log_dir) for m in result.moves] == [("t0", 0, "/data/s1")] and not result.refused


def test_a_planner_that_ignores_the_room_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The room check removed (every directory "unknown"), a replica goes where it does not fit."""
    leaving = LogDirFacts("/data/leaving", replicas=(LogDirReplica("t", 0, 900),))
    staying = (LogDirFacts("/data/s0", usable_bytes=100),)
    assert plan_log_dir_moves(leaving, staying).refused
    blind = plan_log_dir_moves(leaving, tuple(replace(d, usable_bytes=-1) for d in staying))
    assert blind.moves and not blind.refused  # what the property above catches: 900 > 100


# -- the directories a broker keeps -----------------------------------------------------------------

def _cluster(*volumes: int) -> KRaftCluster:
    text = WITH_BROKERS.replace("volumes: [{id: 0, size: 10Gi}, {id: 1, size: 10Gi}]",
                                "volumes: [" + ", ".join(f"{{id: {v}, size: 10Gi}}" for v in volumes) + "]")
    return cluster_from(text)


def _dir(node_id: int, volume: int) -> str:
    return FixedLayout().volume_path(desired_nodes(namespace="ns", cluster="demo", spec=_cluster(0).spec,
                                                   status=None)[node_id].ref, volume_id=volume)


@st.composite
def _broker_reports(draw: st.DrawFn) -> dict[int, tuple[LogDirFacts, ...] | None]:
    reports: dict[int, tuple[LogDirFacts, ...] | None] = {}
    for broker in BROKERS:
        if draw(st.booleans()) and draw(st.booleans()):
            reports[broker] = None  # the broker does not answer
            continue
        dirs = []
        for volume in (0, 1):
            replicas = tuple(draw(_replicas(2)))
            dirs.append(LogDirFacts(_dir(broker, volume), usable_bytes=draw(st.integers(-1, 50_000)),
                                    replicas=replicas))
        reports[broker] = tuple(dirs)
    return reports


def _observed(world: World, cluster: KRaftCluster, reports: dict[int, tuple[LogDirFacts, ...] | None]) -> Observed:
    observed = world.observe(cluster)
    log_dirs = {b: d for b, d in reports.items() if d is not None}
    return replace(observed, cluster=replace(observed.cluster, log_dirs=log_dirs))


def _step(cluster: KRaftCluster, observed: Observed, rules) -> Plan:
    return plan(cluster, observed=observed, layout=FixedLayout(), rules=rules, rng=random.Random(1), now_ms=NOW_MS)


@pytest.fixture(scope="module")
def rules() -> EngineConfigRules:
    return EngineConfigRules()


@pytest.fixture(scope="module")
def ready(rules) -> tuple[KRaftCluster, World]:
    """Three controllers and three JBOD brokers (volumes 0 and 1), running and Ready."""
    world = World(random.Random(0))
    cluster = _cluster(0, 1)
    for _ in range(12):
        result = _step(cluster, world.observe(cluster), rules)
        for action in result.actions:
            world.apply(action)
        cluster = publish(cluster, result.status)
        ready = result.status.condition(ConditionType.READY)
        if ready is not None and ready.status is ConditionStatus.TRUE and not result.actions:
            return cluster, world
    raise AssertionError("not Ready")


def _holding(reports: dict[int, tuple[LogDirFacts, ...] | None]) -> dict[int, set[str]]:
    return {b: {d.path for d in dirs if d.replicas} for b, dirs in reports.items() if dirs is not None}


def _unsafe(result: Plan, world: World, reports: dict[int, tuple[LogDirFacts, ...] | None]) -> list[str]:
    """What the removal promises never to do: a broker's config written without a directory it
    reports holding replicas, or without one it does not report while its written config lists it;
    a restart while a dropped directory holds replicas; a move onto a directory the spec dropped."""
    problems = []
    holding = _holding(reports)
    for action in result.actions:
        node_id = action.node.node_id if hasattr(action, "node") else None
        if isinstance(action, WriteConfig) and node_id in BROKERS:
            dirs = set(action.as_dict()["log.dirs"].split(","))
            written = set((world.nodes[node_id].config or {}).get("log.dirs", "").split(","))
            must = holding.get(node_id, written if reports.get(node_id) is None else set())
            if not must <= dirs:
                problems.append(f"WriteConfig for {node_id} drops {sorted(must - dirs)}")
        if isinstance(action, RestartNode) and any(_dir(b, 1) in paths for b, paths in holding.items()):
            problems.append(f"RestartNode {node_id} while a dropped directory holds replicas")
        if isinstance(action, AlterReplicaLogDirs):
            problems += [f"moved {m.topic}-{m.partition} to {m.log_dir}" for m in action.moves
                         if m.log_dir != _dir(action.node.node_id, 0)]
        if isinstance(action, FormatStorage):
            problems.append(f"FormatStorage for {node_id} of a running cluster")
    return problems


@SETTINGS
@given(_broker_reports())
def test_removing_a_volume_never_drops_a_directory_holding_replicas(ready, rules, reports) -> None:
    cluster, world = ready
    dropped = _cluster(0).model_copy(update={"status": cluster.status})
    result = _step(dropped, _observed(world, dropped, reports), rules)
    assert _unsafe(result, world, reports) == []
    holding = _holding(reports)
    if any(_dir(b, 1) in paths for b, paths in holding.items()):
        assert result.status.operation is not None and result.status.operation.name == LOG_DIR_REMOVAL_OPERATION


def test_a_plan_that_drops_the_directory_at_once_is_caught(ready, rules, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, world = ready
    dropped = _cluster(0).model_copy(update={"status": cluster.status})
    reports = {b: (LogDirFacts(_dir(b, 0), usable_bytes=10_000), LogDirFacts(_dir(b, 1), replicas=(
        LogDirReplica("t", b, 10),))) for b in BROKERS}
    assert _unsafe(_step(dropped, _observed(world, dropped, reports), rules), world, reports) == []
    monkeypatch.setattr(planning_module, "retained_log_dirs", lambda *a, **k: {})
    assert any("drops" in p for p in _unsafe(_step(dropped, _observed(world, dropped, reports), rules), world, reports))


# -- the steps -------------------------------------------------------------------------------------

def test_a_volume_added_is_written_into_log_dirs_and_left_for_the_broker_to_format(ready, rules) -> None:
    cluster, world = ready[0], copy.deepcopy(ready[1])
    added = _cluster(0, 1, 2).model_copy(update={"status": cluster.status})
    result = _step(added, world.observe(added), rules)
    writes = {a.node.node_id: a.as_dict() for a in result.actions if isinstance(a, WriteConfig)}
    assert sorted(writes) == list(BROKERS)
    for broker, config in writes.items():
        assert config["log.dirs"] == ",".join(_dir(broker, v) for v in (0, 1, 2))
        assert config["metadata.log.dir"] == _dir(broker, 0)
    assert not any(isinstance(a, FormatStorage) for a in result.actions)
    for broker in BROKERS:
        world.apply(next(a for a in result.actions if isinstance(a, WriteConfig) and a.node.node_id == broker))
    again = _step(publish(added, result.status), world.observe(added), rules)
    assert not any(isinstance(a, FormatStorage) for a in again.actions)  # the broker's own start formats it


def test_a_removal_records_its_moves_then_moves_then_drops_the_directory(ready, rules) -> None:
    cluster, world = ready
    dropped = _cluster(0).model_copy(update={"status": cluster.status})
    leaving = LogDirFacts(_dir(4, 1), replicas=(LogDirReplica("t", 0, 300), LogDirReplica("t", 1, 200)))
    reports = {b: (LogDirFacts(_dir(b, 0), usable_bytes=10_000), LogDirFacts(_dir(b, 1))) for b in BROKERS}
    reports[4] = (LogDirFacts(_dir(4, 0), usable_bytes=10_000), leaving)
    first = _step(dropped, _observed(world, dropped, reports), rules)
    operation = first.status.operation
    assert operation is not None and (operation.name, operation.step) == (LOG_DIR_REMOVAL_OPERATION, "planned")
    assert [(m.topic, m.partition, m.log_dir) for m in operation.log_dir.moves] == [
        ("t", 0, _dir(4, 0)), ("t", 1, _dir(4, 0))]
    assert first.requeue_after_ms == 0
    assert [a for a in first.actions if isinstance(a, AlterReplicaLogDirs | RestartNode)] == []
    assert not any(isinstance(a, WriteConfig) and a.node.node_id == 4 for a in first.actions)
    assert "LogDirRemovalPlanned" in [e.reason for e in first.events]
    dropped = publish(dropped, first.status)
    second = _step(dropped, _observed(world, dropped, reports), rules)
    moves = [a for a in second.actions if isinstance(a, AlterReplicaLogDirs)]
    assert len(moves) == 1 and moves[0].node.node_id == 4
    assert [(m.topic, m.partition, m.log_dir) for m in moves[0].moves] == [("t", 0, _dir(4, 0)), ("t", 1, _dir(4, 0))]
    assert second.status.operation.step == "moving"
    # one copy under way, one done: only the replica not moving yet is named again
    dropped = publish(dropped, second.status)
    reports[4] = (LogDirFacts(_dir(4, 0), usable_bytes=10_000, replicas=(LogDirReplica("t", 1, 200),
                                                                         LogDirReplica("t", 0, 100, True))),
                  LogDirFacts(_dir(4, 1), replicas=(LogDirReplica("t", 0, 300),)))
    third = _step(dropped, _observed(world, dropped, reports), rules)
    assert [a.moves for a in third.actions if isinstance(a, AlterReplicaLogDirs)] == []
    assert "1 replica(s) still there, 1 copying" in third.waiting_for
    # empty: the directory leaves the config; the roll restarts the broker without it
    dropped = publish(dropped, third.status)
    reports[4] = (LogDirFacts(_dir(4, 0), usable_bytes=10_000, replicas=(LogDirReplica("t", 0, 300),
                                                                         LogDirReplica("t", 1, 200))),
                  LogDirFacts(_dir(4, 1)))
    fourth = _step(dropped, _observed(world, dropped, reports), rules)
    assert "LogDirDrained" in [e.reason for e in fourth.events]
    writes = {a.node.node_id: a.as_dict()["log.dirs"] for a in fourth.actions if isinstance(a, WriteConfig)}
    assert writes == {b: _dir(b, 0) for b in BROKERS}
    assert fourth.status.operation is None or fourth.status.operation.name != LOG_DIR_REMOVAL_OPERATION


def test_a_removal_without_room_is_refused_naming_the_replica_and_the_bytes(ready, rules) -> None:
    cluster, world = ready
    dropped = _cluster(0).model_copy(update={"status": cluster.status})
    reports = {b: (LogDirFacts(_dir(b, 0), usable_bytes=10_000), LogDirFacts(_dir(b, 1))) for b in BROKERS}
    reports[5] = (LogDirFacts(_dir(5, 0), usable_bytes=1000), LogDirFacts(_dir(5, 1), replicas=(
        LogDirReplica("big", 0, 5000),)))
    result = _step(dropped, _observed(world, dropped, reports), rules)
    operation = result.status.operation
    assert operation is not None and (operation.name, operation.step) == (LOG_DIR_REMOVAL_OPERATION, "refused")
    assert [b.kind for b in operation.blocked_by] == ["log-dir"]
    assert "big-0 (5000 bytes)" in operation.blocked_by[0].message and "1000 bytes left" in operation.blocked_by[0].message
    degraded = result.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.status is ConditionStatus.TRUE and degraded.reason == "LogDirRemovalRefused"
    assert "LogDirRemovalRefused" in [e.reason for e in result.events]
    assert [a for a in result.actions if isinstance(a, AlterReplicaLogDirs | RestartNode)] == []
    assert not any(isinstance(a, WriteConfig) and a.node.node_id == 5 for a in result.actions)
    again = _step(publish(dropped, result.status), _observed(world, dropped, reports), rules)
    assert "LogDirRemovalRefused" not in [e.reason for e in again.events]  # said once, kept in status


def test_the_metadata_volume_cannot_be_removed(ready, rules) -> None:
    cluster, world = ready
    dropped = _cluster(1).model_copy(update={"status": cluster.status})
    result = _step(dropped, world.observe(dropped), rules)
    degraded = result.status.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason == "InvalidSpec"
    assert "holds its metadata log" in degraded.message and result.actions == ()


# -- a broker's failed metadata volume: the broker halts --------------------------------------------

def _halted(world: World, cluster: KRaftCluster, node_id: int, message: str) -> Observed:
    observed = world.observe(cluster)
    nodes = dict(observed.nodes)
    nodes[node_id] = replace(nodes[node_id], phase=PodPhase.FAILED, ready=False, exit_code=1, message=message)
    brokers = {b: f for b, f in observed.cluster.brokers.items() if b != node_id}
    return replace(observed, nodes=nodes, cluster=replace(observed.cluster, brokers=brokers))


def test_a_broker_halted_by_its_failed_metadata_volume_opens_broker_disk_loss_waiting_for_approval(ready, rules) -> None:
    """The metadata log's volume fails with its files in place: the broker halts (exit 1, its one
    ERROR line names the directory) and answers nothing, so DescribeLogDirs cannot say it; the
    exit does. The replacement waits for approval, blockedBy and the runbook say why."""
    cluster, world = ready
    path = _dir(4, 0)
    error = (f"2026-11-26 09:30:00,000 ERROR kraft_engine.server.raft_driver: cannot append to {path}/"
             "__cluster_metadata-0/00000000000000000000.log: [Errno 28] No space left on device; stopping node 4")
    result = _step(cluster, _halted(world, cluster, 4, error), rules)
    operation = result.status.operation
    assert operation is not None and (operation.name, operation.step) == ("BrokerVolumeReplacement", "await-approval")
    assert (operation.volume.node_id, operation.volume.volume_id, operation.volume.path) == (4, 0, path)
    blocker = operation.blocked_by[0]
    assert blocker.kind == "approval" and "halted on it, its metadata log directory" in blocker.message
    assert "No space left on device" in blocker.message and "broker-disk-loss/replace-volume" in blocker.message
    runbook = next(r for r in result.status.runbooks if r.name == "broker-disk-loss")
    assert any("halted on its metadata log directory (exit code 1" in e for e in runbook.evidence)
    assert "VolumeLost" in [e.reason for e in result.events]
    assert not any(type(a).__name__ == "ReplaceVolume" for a in result.actions)


def test_a_broker_that_exits_for_another_reason_is_no_disk_loss(ready, rules) -> None:
    cluster, world = ready
    result = _step(cluster, _halted(world, cluster, 4, "Error: listeners: invalid port"), rules)
    assert result.status.operation is None or result.status.operation.name != "BrokerVolumeReplacement"
    assert not any(r.name == "broker-disk-loss" for r in result.status.runbooks)
    assert any(type(a).__name__ == "StartNode" and a.node.node_id == 4 for a in result.actions)  # restarted


def test_without_reading_the_exit_the_halted_broker_goes_unseen(ready, rules, monkeypatch: pytest.MonkeyPatch) -> None:
    cluster, world = ready
    error = f"ERROR cannot append to {_dir(4, 0)}/__cluster_metadata-0: [Errno 5] Input/output error; stopping node 4"
    assert _step(cluster, _halted(world, cluster, 4, error), rules).status.operation is not None
    monkeypatch.setattr(NodeFacts, "halted_on", lambda self, path: None)
    blind = _step(cluster, _halted(world, cluster, 4, error), rules)
    assert blind.status.operation is not None and blind.status.operation.name == "Bootstrap"  # a crash loop,
    assert not blind.status.runbooks  # restarted again and again, and no runbook says why


def test_a_directory_reported_with_a_trailing_slash_is_the_same_directory(ready, rules) -> None:
    """No removal, no retained directory, when a broker names its directories with a trailing slash."""
    cluster, world = ready
    reports = {b: (LogDirFacts(_dir(b, 0) + "/", replicas=(LogDirReplica("t", 0, 10),)),
                   LogDirFacts(_dir(b, 1) + "/", replicas=(LogDirReplica("t", 1, 10),))) for b in BROKERS}
    result = _step(cluster, _observed(world, cluster, reports), rules)
    assert result.status.operation is None and result.actions == (), (result.status.operation, result.actions)
