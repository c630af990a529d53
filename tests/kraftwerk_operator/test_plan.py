"""The planner, decision by decision, against the simulated world of `world.py`."""

from __future__ import annotations

import random
from dataclasses import replace

from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.plan import (
    ClusterFacts,
    FormatStorage,
    JobPhase,
    LogDirFacts,
    NodeFacts,
    Observed,
    PartitionFacts,
    Plan,
    QuorumBootstrap,
    StartNode,
    VolumeFacts,
    WriteConfig,
    plan,
)

from .builders import THREE_CONTROLLERS, WITH_BROKERS, FixedLayout, cluster_from
from .world import World, publish

NOW_MS = 1_700_000_000_000


def step(cluster: KRaftCluster, world: World, *, rules, seed: int = 1, apply: bool = True) -> tuple[KRaftCluster, Plan]:
    result = plan(cluster, observed=world.observe(cluster), layout=FixedLayout(), rules=rules,
                  rng=random.Random(seed), now_ms=NOW_MS)
    if apply:
        for action in result.actions:
            world.apply(action)
    return publish(cluster, result.status), result


def until_ready(cluster: KRaftCluster, world: World, *, rules, limit: int = 12) -> tuple[KRaftCluster, Plan]:
    for _ in range(limit):
        cluster, result = step(cluster, world, rules=rules)
        ready = result.status.condition(ConditionType.READY)
        if ready is not None and ready.status is ConditionStatus.TRUE and not result.actions:
            return cluster, result
    raise AssertionError(f"not Ready after {limit} reconciles: {result.status.conditions}")


def condition(result: Plan, kind: ConditionType):
    found = result.status.condition(kind)
    assert found is not None
    return found


def test_first_reconcile_only_records_cluster_id_and_initial_controllers(rules) -> None:
    cluster = cluster_from(THREE_CONTROLLERS)
    _, result = step(cluster, World(random.Random(0)), rules=rules)
    assert result.actions == ()
    status = result.status
    assert status.cluster_id is not None and len(status.cluster_id) == 22
    entries = status.initial_controllers.split(",")
    assert [e.split(":")[0] for e in entries] == ["0@n0.test", "1@n1.test", "2@n2.test"]
    assert all(e.split(":")[1] == "9093" and len(e.split(":")[2]) == 22 for e in entries)
    assert [n.id for n in status.nodes] == [0, 1, 2]
    assert condition(result, ConditionType.PROGRESSING).reason == "Initializing"
    assert condition(result, ConditionType.READY).status is ConditionStatus.FALSE
    assert status.observed_generation == 1


def test_second_reconcile_writes_configs_and_formats_the_initial_controllers(rules) -> None:
    world = World(random.Random(0))
    cluster, first = step(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    _, result = step(cluster, world, rules=rules, apply=False)
    kinds = [type(a).__name__ for a in result.actions]
    assert kinds == ["WriteConfig", "FormatStorage"] * 3
    formats = [a for a in result.actions if isinstance(a, FormatStorage)]
    assert {f.bootstrap for f in formats} == {QuorumBootstrap.INITIAL}
    assert {f.initial_controllers for f in formats} == {first.status.initial_controllers}
    assert {f.cluster_id for f in formats} == {first.status.cluster_id}
    args = formats[0].format_arguments(config_path="/c/server.properties")
    assert args[:4] == ["format", "--config", "/c/server.properties", "--cluster-id"]
    assert "--initial-controllers" in args and "--ignore-formatted" not in args
    assert condition(result, ConditionType.PROGRESSING).reason == "WritingConfig"
    assert result.status.operation is not None and result.status.operation.name == "Bootstrap"


def test_controllers_start_once_formatted_and_the_cluster_becomes_ready(rules) -> None:
    world = World(random.Random(0))
    _cluster, result = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    assert world.log.count("FormatStorage 0") == 1
    assert [line for line in world.log if line.startswith("StartNode")] == ["StartNode 0", "StartNode 1", "StartNode 2"]
    status = result.status
    assert status.controllers == "3/3" and status.brokers == "0/0"
    assert condition(result, ConditionType.READY).status is ConditionStatus.TRUE
    assert condition(result, ConditionType.PROGRESSING).reason == "Reconciled"
    assert condition(result, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert status.operation is None
    assert all(n.formatted and n.directories[0].directory_id for n in status.nodes)
    assert status.quorum is not None and status.quorum.leader_id == 0
    assert status.metadata_version.finalized == "4.1-IV1"
    assert world.violations == []


def test_brokers_start_only_after_the_quorum_has_a_leader(rules) -> None:
    world = World(random.Random(0))
    cluster = cluster_from(WITH_BROKERS)
    cluster, _ = step(cluster, world, rules=rules)
    cluster, _ = step(cluster, world, rules=rules)  # configs + formats
    cluster, result = step(cluster, world, rules=rules, apply=False)
    starts = [a.node.node_id for a in result.actions if isinstance(a, StartNode)]
    assert starts == [0, 1, 2]
    assert "a quorum leader before broker(s) [3, 4, 5] start" in result.waiting_for
    for action in result.actions:
        world.apply(action)
    cluster, result = step(cluster, world, rules=rules)
    assert [a.node.node_id for a in result.actions if isinstance(a, StartNode)] == [3, 4, 5]
    cluster, result = until_ready(cluster, world, rules=rules)
    assert result.status.brokers == "3/3"
    assert all(n.registered and n.fenced is False for n in result.status.nodes if n.pool == "brokers")


def test_broker_formats_take_no_quorum_flag_and_jbod_formats_every_volume(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = step(cluster_from(WITH_BROKERS), world, rules=rules)
    _, result = step(cluster, world, rules=rules, apply=False)
    broker_format = next(a for a in result.actions if isinstance(a, FormatStorage) and a.node.node_id == 3)
    assert broker_format.bootstrap is QuorumBootstrap.NONE
    assert broker_format.directories == ("/data/3/0", "/data/3/1")
    args = broker_format.format_arguments(config_path="c")
    assert "--initial-controllers" not in args and "--no-initial-controllers" not in args
    assert broker_format.release_version == "4.1-IV1"  # the newest Kafka 4.1 runs, below the engine's


def test_rendered_configs_pass_the_engines_own_rules(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = step(cluster_from(WITH_BROKERS), world, rules=rules)
    _, result = step(cluster, world, rules=rules, apply=False)
    configs = {a.node.node_id: a.as_dict() for a in result.actions if isinstance(a, WriteConfig)}
    controller, broker = configs[0], configs[3]
    assert controller["process.roles"] == "controller"
    assert controller["listeners"] == "CONTROLLER://:9093"
    assert controller["advertised.listeners"] == "CONTROLLER://n0.test:9093"
    assert controller["controller.quorum.bootstrap.servers"] == "n0.test:9093,n1.test:9093,n2.test:9093"
    assert controller["kraftwerk.metrics.port"] == "9404"
    assert broker["process.roles"] == "broker"
    assert broker["listeners"] == "PLAINTEXT://:9092"
    assert broker["log.dirs"] == "/data/3/0,/data/3/1" and broker["metadata.log.dir"] == "/data/3/0"
    assert "kraftwerk.metrics.port" not in broker  # Kafka's broker does not know our key
    assert all(rules.node_problem(c) is None for c in configs.values())


def test_a_controller_added_later_joins_with_no_initial_controllers(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    grown = cluster.spec.model_copy(update={"node_pools": [cluster.spec.node_pools[0].model_copy(update={"replicas": 4})]})
    cluster = cluster.model_copy(update={"spec": grown})
    _, result = step(cluster, world, rules=rules, apply=False)
    fmt = next(a for a in result.actions if isinstance(a, FormatStorage))
    assert fmt.node.node_id == 3 and fmt.bootstrap is QuorumBootstrap.JOIN
    assert "--no-initial-controllers" in fmt.format_arguments(config_path="c")
    # The existing controllers see a new bootstrap list: written, applied at their next restart.
    rewrites = [a for a in result.actions if isinstance(a, WriteConfig) and a.node.node_id < 3]
    assert len(rewrites) == 3 and "next restart" in rewrites[0].reason


def test_a_lost_volume_is_never_reformatted(rules) -> None:
    world = World(random.Random(0))
    cluster, ready = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    lost_id = ready.status.node(1).directories[0].directory_id
    world.lose_volume(1)
    for _ in range(3):
        cluster, result = step(cluster, world, rules=rules)
        assert not any(isinstance(a, FormatStorage) for a in result.actions)
    degraded = condition(result, ConditionType.DEGRADED)
    assert degraded.status is ConditionStatus.TRUE
    assert "node 1: volume 0 (/data/1/0) was formatted" in degraded.message and lost_id in degraded.message
    assert result.status.node(1).directories[0].directory_id == lost_id
    assert world.violations == []


def test_a_crashed_node_is_restarted_and_reported(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    world.crash(2)
    _, result = step(cluster, world, rules=rules)
    assert [a.node.node_id for a in result.actions] == [2]
    assert isinstance(result.actions[0], StartNode)
    assert "node 2 exited" in condition(result, ConditionType.DEGRADED).message


def test_a_failed_format_job_blocks_that_node_and_is_not_retried(rules) -> None:
    world = World(random.Random(0), fail_formats={1})
    cluster = cluster_from(THREE_CONTROLLERS)
    for _ in range(4):
        cluster, result = step(cluster, world, rules=rules)
    assert world.jobs[1].phase is JobPhase.FAILED
    assert world.log.count("FormatStorage 1") == 1
    assert "node 1: the format job failed: disk full" in condition(result, ConditionType.DEGRADED).message


def test_paused_observes_and_never_acts(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = step(cluster_from(THREE_CONTROLLERS, paused=True), world, rules=rules)
    for _ in range(3):
        cluster, result = step(cluster, world, rules=rules)
        assert result.actions == ()
    assert condition(result, ConditionType.PAUSED).status is ConditionStatus.TRUE
    assert condition(result, ConditionType.PROGRESSING).reason == "Paused"


def test_an_operator_restarted_mid_way_resumes_from_status(rules) -> None:
    world = World(random.Random(0))
    cluster, first = step(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    cluster, _ = step(cluster, world, rules=rules)  # formats applied...
    stale = cluster.model_copy(update={"status": first.status})  # ...but that status write was lost
    _, again = step(stale, world, rules=rules, seed=99)
    assert not any(isinstance(a, FormatStorage) for a in again.actions)
    assert again.status.cluster_id == first.status.cluster_id
    assert [a.node.node_id for a in again.actions if isinstance(a, StartNode)] == [0, 1, 2]


def test_status_lost_but_volumes_kept_adopts_their_cluster_id(rules) -> None:
    world = World(random.Random(0))
    cluster, ready = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    fresh = cluster.model_copy(update={"status": None})
    _, result = step(fresh, world, rules=rules, seed=7)
    assert result.status.cluster_id == ready.status.cluster_id
    assert result.actions == ()


def test_refusals_name_the_field_and_never_act(rules) -> None:
    observed_sizes = Observed(nodes={0: NodeFacts(0, "controllers", volumes=(VolumeFacts(0, "/data/0/0", size_bytes=2**31),))})
    cases = [
        (cluster_from(THREE_CONTROLLERS, config={"bogus.key": "1"}), Observed(), "spec.config[bogus.key]: unknown configuration"),
        (cluster_from(THREE_CONTROLLERS, config={"controller.quorum.election.timeout.ms": "soon"}), Observed(),
         "spec.config[controller.quorum.election.timeout.ms]: Invalid value soon"),
        (cluster_from(THREE_CONTROLLERS, config={"node.id": "7"}), Observed(), "spec.config[node.id]: is managed by the operator"),
        (cluster_from(THREE_CONTROLLERS, metadataVersion="4.3-IV0"), Observed(), "spec.metadataVersion: Unknown metadata.version"),
        (cluster_from(WITH_BROKERS, metadataVersion="4.2-IV1"), Observed(), "spec.metadataVersion: 4.2-IV1 is newer than 4.1-IV1"),
        (cluster_from(THREE_CONTROLLERS), observed_sizes, "spec.nodePools[0].storage.volumes[0].size: 1Gi is smaller"),
        (cluster_from(WITH_BROKERS), Observed(cluster=ClusterFacts(partitions=PartitionFacts(max_replication_factor=5))),
         "spec.nodePools: 3 broker replicas are fewer than the replication factor 5"),
        (cluster_from(THREE_CONTROLLERS, listeners=[{"name": "CONTROLLER", "port": 9000}]), Observed(),
         "spec.listeners[0].name: CONTROLLER is the controllers' own listener"),
        (cluster_from(THREE_CONTROLLERS, config={"broker.heartbeat.interval.ms": "20000"}), Observed(),
         "spec.config[broker.heartbeat.interval.ms]: broker.heartbeat.interval.ms (20000) must be less than"),
    ]
    for cluster, observed, expected in cases:
        result = plan(cluster, observed=observed, layout=FixedLayout(), rules=rules, rng=random.Random(1), now_ms=NOW_MS)
        degraded = condition(result, ConditionType.DEGRADED)
        assert result.actions == (), expected
        assert degraded.status is ConditionStatus.TRUE and degraded.reason == "InvalidSpec"
        assert expected in degraded.message, (expected, degraded.message)
        assert condition(result, ConditionType.PROGRESSING).status is ConditionStatus.FALSE
        assert result.status.cluster_id is None  # not even a cluster id is assigned


def test_every_key_the_engine_reads_as_node_wiring_is_refused_as_a_spec_override(rules) -> None:
    # The operator and the engine share one set (kraft_engine.node_config_keys): an override of any
    # key the engine parses as a node's identity, listeners, quorum or directories is refused.
    from kraft_engine.node_config_keys import NODE_WIRING_KEYS
    from kraft_engine.server.config import parse_config

    for key in sorted(NODE_WIRING_KEYS):
        result = plan(cluster_from(THREE_CONTROLLERS, config={key: "x"}), observed=Observed(), layout=FixedLayout(),
                      rules=rules, rng=random.Random(1), now_ms=NOW_MS)
        assert result.actions == (), key
        assert f"spec.config[{key}]: is managed by the operator" in condition(result, ConditionType.DEGRADED).message
    # ...and the engine reads every one of them (none is reported as an unknown key).
    wiring = {
        "process.roles": "broker,controller", "node.id": "1",
        "listeners": "PLAINTEXT://:9092,CONTROLLER://:9093",
        "advertised.listeners": "PLAINTEXT://h:9092,CONTROLLER://h:9093",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
        "controller.quorum.voters": "1@h:9093", "log.dirs": "/d/0,/d/1", "metadata.log.dir": "/d/0",
        "broker.rack": "r1",
    }
    alternatives = {"security.inter.broker.protocol": ("inter.broker.listener.name", "PLAINTEXT"),
                    "controller.quorum.bootstrap.servers": ("controller.quorum.voters", "h:9093"),
                    "log.dir": ("log.dirs", "/d/0")}
    assert set(wiring) | set(alternatives) == NODE_WIRING_KEYS
    assert parse_config(wiring).unknown_keys == ()
    for key, (instead_of, value) in alternatives.items():
        variant = {k: v for k, v in wiring.items() if k != instead_of} | {key: value}
        assert parse_config(variant).unknown_keys == (), key


def test_immutable_roles_and_cluster_id_are_refused_against_status(rules) -> None:
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(THREE_CONTROLLERS), world, rules=rules)
    pool = cluster.spec.node_pools[0].model_copy(update={"roles": ["controller", "broker"], "implementation": "apache-kafka"})
    changed = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": [pool]})})
    _, result = step(changed, world, rules=rules)
    message = condition(result, ConditionType.DEGRADED).message
    assert "spec.nodePools[0].roles: a node pool's roles are immutable (its nodes run as controller)" in message
    other = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"cluster_id": "AAAAAAAAAAAAAAAAAAAAAA"})})
    _, result = step(other, world, rules=rules)
    assert "spec.clusterId: AAAAAAAAAAAAAAAAAAAAAA differs from the cluster's id" in condition(result, ConditionType.DEGRADED).message
    assert result.actions == ()


def test_a_lost_jbod_volume_blocks_its_node_and_keeps_both_directories_in_status(rules) -> None:
    world = World(random.Random(0))
    cluster, ready = until_ready(cluster_from(WITH_BROKERS), world, rules=rules)
    before = [d.directory_id for d in ready.status.node(3).directories]
    world.lose_volume(3)  # volume 0 of broker 3's two
    cluster, result = step(cluster, world, rules=rules)
    assert not any(a.node.node_id == 3 for a in result.actions)
    node = result.status.node(3)
    assert [d.directory_id for d in node.directories] == before
    assert "node 3: volume 0 (/data/3/0) was formatted" in condition(result, ConditionType.DEGRADED).message
    assert world.violations == []


def _format_features(text: str, rules, **spec_changes: object) -> set[tuple[tuple[str, int], ...]]:
    world = World(random.Random(0))
    cluster, _ = step(cluster_from(text, **spec_changes), world, rules=rules)
    _, result = step(cluster, world, rules=rules, apply=False)
    return {a.feature_levels for a in result.actions if isinstance(a, FormatStorage)}


def test_format_finalizes_only_levels_every_pool_supports(rules) -> None:
    # The engine's brokers lack the coordinators behind group.version 1 and transaction.version
    # 1-2: a cluster that runs them is formatted at level 0 of each (Kafka's defaults would refuse
    # them at registration). eligible.leader.replicas.version 1 they support: Kafka's default stays.
    engine_brokers = WITH_BROKERS.replace("      implementation: apache-kafka\n", "")
    assert "apache-kafka" not in engine_brokers
    assert _format_features(engine_brokers, rules) == {(
        ("group.version", 0), ("share.version", 0), ("transaction.version", 0),
    )}
    world = World(random.Random(0))
    cluster, _ = step(cluster_from(engine_brokers), world, rules=rules)
    _, result = step(cluster, world, rules=rules, apply=False)
    args = next(a for a in result.actions if isinstance(a, FormatStorage)).format_arguments(config_path="/c")
    at = args.index("--feature")
    assert args[at:at + 2] == ["--feature", "group.version=0"]
    # Engine controllers alone, or with Apache Kafka brokers, support every level Kafka's
    # defaults for the release finalize: no overrides, the same records as kafka-storage writes.
    assert _format_features(THREE_CONTROLLERS, rules) == {()}
    assert _format_features(WITH_BROKERS, rules) == {()}


def test_an_offline_log_dir_a_broker_reports_is_in_status_and_degraded_without_blocking(rules) -> None:
    """DescribeLogDirs facts: each directory's state and space in status; an offline one (Kafka's
    KAFKA_STORAGE_ERROR) makes the cluster Degraded, naming node and path, and blocks nothing."""
    world = World(random.Random(0))
    cluster, _ = until_ready(cluster_from(WITH_BROKERS), world, rules=rules)
    observed = world.observe(cluster)
    assert observed.cluster is not None
    log_dirs = {
        3: (LogDirFacts(path="/data/3/0", total_bytes=1000, usable_bytes=400),
            LogDirFacts(path="/data/3/1/", error="KAFKA_STORAGE_ERROR")),
        4: (LogDirFacts(path="/data/4/0", total_bytes=1000, usable_bytes=900),),
    }
    healthy = replace(observed, cluster=replace(observed.cluster, log_dirs={4: log_dirs[4]}))
    failing = replace(observed, cluster=replace(observed.cluster, log_dirs=log_dirs))
    results = [plan(cluster, observed=o, layout=FixedLayout(), rules=rules, rng=random.Random(1), now_ms=NOW_MS)
               for o in (healthy, failing)]
    assert condition(results[0], ConditionType.DEGRADED).status is ConditionStatus.FALSE
    degraded = condition(results[1], ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, "LogDirOffline")
    assert "node 3: log directory /data/3/1 is offline (KAFKA_STORAGE_ERROR)" in degraded.message
    assert results[1].actions == results[0].actions  # nothing is blocked by it
    node3 = results[1].status.node(3)
    assert [(d.path, d.offline, d.total_bytes, d.usable_bytes) for d in node3.directories] == [
        ("/data/3/0", False, 1000, 400), ("/data/3/1", True, None, None)]
    node5 = results[1].status.node(5)
    assert all(d.offline is None for d in node5.directories)  # not asked, or no answer: unknown
