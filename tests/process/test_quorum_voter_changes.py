"""KIP-853 on real processes: grow, shrink, replace a disk, and the refusals that change nothing.

Every node runs the quorum controller (not the append-only test store): client writes go through
the active controller, so a voter change that disturbed it would show. A write here is an
IncrementalAlterConfigs of the cluster-default broker config `kraftwerk.test.entry.<ns>` (one
ConfigRecord, no brokers needed); a node's entries are what DescribeConfigs answers from its
committed state, in write order.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import shutil
import signal
import subprocess
import time
from typing import Any

import pytest
from kio.schema.create_topics.v7.request import CreatableTopic, CreateTopicsRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.types import TopicName
from kio.static.primitive import i8, i16, i32, i32Timedelta
from played_brokers import CONTROLLER_MODE, controller_metric, fetch_metadata, register_brokers, stop_all
from quorum_processes import (
    HOST,
    KRAFT,
    ProcessCluster,
    describe_status,
    directory_of,
    kraft_tool,
    metadata_quorum,
    voter_ids,
    wait_for,
)

from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.loopback_ports import free_loopback_ports
from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError

pytestmark = pytest.mark.process

_ENTRY = "kraftwerk.test.entry."
_BROKER_RESOURCE = 4


@pytest.fixture(autouse=True)
def _quorum_controller(cluster: ProcessCluster) -> None:
    cluster.extra_config.update(CONTROLLER_MODE)


def _append(cluster: ProcessCluster, values: list[str], *, node_ids: list[int] | None = None) -> None:
    """Write `values` through the active controller (retried across elections, as an admin client does)."""

    async def write() -> None:
        ids = sorted(cluster.nodes) if node_ids is None else node_ids
        async with ControllerAdmin([(HOST, cluster.nodes[n].port) for n in ids], timeout_ms=60000) as admin:
            for value in values:
                response = await admin.send_to_active(IncrementalAlterConfigsRequest(
                    resources=(AlterConfigsResource(
                        resource_type=i8(_BROKER_RESOURCE), resource_name="",
                        configs=(AlterableConfig(name=f"{_ENTRY}{time.monotonic_ns()}", config_operation=i8(0),
                                                 value=value),),
                    ),),
                    validate_only=False,
                ))
                [result] = response.responses
                assert result.error_code == ErrorCode.none, result

    try:
        asyncio.run(write())
    except ControllerAdminError as error:
        raise AssertionError(str(error)) from error


def _entries(cluster: ProcessCluster, node_id: int) -> list[str]:
    """The values node `node_id` has committed, oldest first."""

    async def describe() -> Any:
        async with ControllerAdmin([(HOST, cluster.nodes[node_id].port)], timeout_ms=30000) as admin:
            return await admin.send_to_any(DescribeConfigsRequest(
                resources=(DescribeConfigsResource(resource_type=i8(_BROKER_RESOURCE), resource_name="",
                                                   configuration_keys=None),),
                include_synonyms=False, include_documentation=False,
            ))

    try:
        [result] = asyncio.run(describe()).results
    except ControllerAdminError as error:  # not serving yet: "not yet" for wait_for
        raise AssertionError(str(error)) from error
    assert result.error_code == ErrorCode.none, result
    entries = sorted((int(c.name[len(_ENTRY):]), c.value) for c in result.configs if c.name.startswith(_ENTRY))
    return [value for _, value in entries]


def _observer_caught_up(cluster: ProcessCluster, node_id: int, bootstrap_ids: list[int]) -> bool:
    rows = json.loads(metadata_quorum(cluster, "--output", "json", "describe", "--replication",
                                      bootstrap_ids=bootstrap_ids, check=True).stdout)
    return any(r["nodeId"] == node_id and r["status"] == "Observer" and r["lag"] == 0 for r in rows)


def _add(cluster: ProcessCluster, node_id: int, bootstrap_ids: list[int]) -> None:
    wait_for(lambda: _observer_caught_up(cluster, node_id, bootstrap_ids), timeout_s=60,
             what=f"controller {node_id} to catch up as an observer")
    result = metadata_quorum(cluster, "add-controller", "--config", str(cluster.nodes[node_id].config_path),
                             bootstrap_ids=bootstrap_ids)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Added controller {node_id} with directory id ")


def _remove(cluster: ProcessCluster, node_id: int, directory_id: str, bootstrap_ids: list[int],
            *extra: str) -> str:
    result = metadata_quorum(cluster, "remove-controller", "--controller-id", str(node_id),
                             "--controller-directory-id", directory_id, *extra, bootstrap_ids=bootstrap_ids)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_grow_from_one_standalone_controller_to_three(cluster: ProcessCluster) -> None:
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    cluster.format(1, "--standalone")
    cluster.format(2, "--no-initial-controllers")
    cluster.format(3, "--no-initial-controllers")
    cluster.start_all([1, 2, 3])
    assert cluster.wait_for_leader() == 1
    _append(cluster, ["one-voter"])
    assert voter_ids(describe_status(cluster, bootstrap_ids=[1])) == [1]

    # A controller that is not running cannot be caught up: refused, nothing changes.
    cluster.kill(3)
    refused = metadata_quorum(cluster, "add-controller", "--config", str(cluster.nodes[3].config_path),
                              bootstrap_ids=[1])
    assert refused.returncode == 1 and "Error: AddRaftVoter: REQUEST_TIMED_OUT" in refused.stderr
    assert voter_ids(describe_status(cluster, bootstrap_ids=[1])) == [1]
    cluster.start(3)

    _add(cluster, 2, [1])
    assert voter_ids(describe_status(cluster, bootstrap_ids=[1])) == [1, 2]
    _add(cluster, 3, [1, 2])
    status = describe_status(cluster)
    assert voter_ids(status) == [1, 2, 3]
    assert status["currentObservers"] == []
    _append(cluster, ["three-voters"])
    wait_for(lambda: all(_entries(cluster, n)[:2] == ["one-voter", "three-voters"] for n in (1, 2, 3)),
             timeout_s=60, what="every voter to hold both entries")
    # The grown quorum survives the loss of its first controller.
    cluster.kill(1)
    cluster.wait_for_leader([2, 3])
    _append(cluster, ["after-losing-1"], node_ids=[2, 3])


def test_shrink_from_three_to_one_removing_the_leader_too(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    _append(cluster, ["three"])
    status = describe_status(cluster)
    follower = next(n for n in (1, 2, 3) if n != leader)
    output = _remove(cluster, follower, directory_of(status, follower), [1, 2, 3])
    assert output.startswith(f"Removed  KRaft controller {follower}") or output.startswith(
        f"Removed KRaft controller {follower}")
    remaining = [n for n in (1, 2, 3) if n != follower]
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=remaining)) == remaining, timeout_s=60,
             what="the follower to leave the voter set")

    # Now remove the current leader: it commits its own removal and resigns.
    leader = cluster.wait_for_leader(remaining)
    status = describe_status(cluster, bootstrap_ids=remaining)
    _remove(cluster, leader, directory_of(status, leader), remaining)
    last = next(n for n in remaining if n != leader)
    wait_for(lambda: cluster.leader([last]) == last, timeout_s=60, what=f"controller {last} to lead alone")
    final = describe_status(cluster, bootstrap_ids=[last])
    assert voter_ids(final) == [last]
    _append(cluster, ["one"], node_ids=[last])
    assert _entries(cluster, last)[:2] == ["three", "one"]


def test_removal_that_leaves_no_reachable_majority_is_refused_unless_forced(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    status = describe_status(cluster)
    down, victim = [n for n in (1, 2, 3) if n != leader]
    cluster.kill(down)
    refused = metadata_quorum(cluster, "remove-controller", "--controller-id", str(victim),
                              "--controller-directory-id", directory_of(status, victim),
                              bootstrap_ids=[leader, victim])
    assert refused.returncode == 1
    assert "Refusing to remove controller" in refused.stderr and "--force" in refused.stderr
    assert voter_ids(describe_status(cluster, bootstrap_ids=[leader, victim])) == [1, 2, 3]
    # Removing the unreachable one instead is allowed: the remaining two are both reachable.
    _remove(cluster, down, directory_of(status, down), [leader, victim])
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=[leader, victim])) == sorted([leader, victim]),
             timeout_s=60, what="the dead controller to leave the voter set")


def test_replace_a_controllers_disk(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    _append(cluster, ["before-replacement"])
    replaced = next(n for n in (1, 2, 3) if n != leader)
    old_directory = directory_of(describe_status(cluster), replaced)
    cluster.kill(replaced)
    shutil.rmtree(cluster.nodes[replaced].data_dir)
    cluster.format(replaced, "--no-initial-controllers")
    others = [n for n in (1, 2, 3) if n != replaced]
    _remove(cluster, replaced, old_directory, others)
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=others)) == others, timeout_s=60,
             what="the old disk's voter to be removed")
    cluster.start(replaced)
    _add(cluster, replaced, others)
    status = describe_status(cluster)
    assert voter_ids(status) == [1, 2, 3]
    assert directory_of(status, replaced) != old_directory
    wait_for(lambda: _entries(cluster, replaced)[:1] == ["before-replacement"], timeout_s=60,
             what="the new disk to be filled from the leader")


def test_a_voter_change_while_another_is_uncommitted_is_refused_and_changes_nothing(cluster: ProcessCluster) -> None:
    # A long fetch timeout keeps the leader from resigning (check-quorum) while a voter is frozen.
    cluster.extra_config["controller.quorum.fetch.timeout.ms"] = "20000"
    cluster.extra_config["controller.quorum.request.timeout.ms"] = "2000"
    for node_id in (1, 2, 3, 4):
        cluster.add_node(node_id)
    cluster.format_initial([1, 2, 3])
    cluster.format(4, "--no-initial-controllers")
    cluster.start_all([1, 2, 3, 4])
    leader = cluster.wait_for_leader([1, 2, 3])
    _append(cluster, ["before"], node_ids=[1, 2, 3])
    wait_for(lambda: _observer_caught_up(cluster, 4, [leader]), timeout_s=60, what="controller 4 to catch up")
    frozen, removed = [n for n in (1, 2, 3) if n != leader]
    status = describe_status(cluster, bootstrap_ids=[leader])

    # Removing `removed` needs the new voter set {leader, frozen} to commit it; `frozen` is
    # stopped, so the change stays uncommitted (forced past the CLI's reachability check).
    cluster.signal(frozen, signal.SIGSTOP)
    removal = subprocess.Popen(
        [KRAFT, "metadata-quorum", "--bootstrap-controller", cluster.bootstrap_servers([leader]), "remove-controller",
         "--controller-id", str(removed), "--controller-directory-id", directory_of(status, removed), "--force"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        pending = sorted([leader, frozen])
        wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=[leader])) == pending, timeout_s=60,
                 what="the leader to append the uncommitted removal")
        high_watermark = describe_status(cluster, bootstrap_ids=[leader])["highWatermark"]

        refused = metadata_quorum(cluster, "add-controller", "--config", str(cluster.nodes[4].config_path),
                                  bootstrap_ids=[leader])
        assert refused.returncode == 1
        assert "Error: AddRaftVoter: REQUEST_TIMED_OUT: the leader has another voter change that is not committed" \
            in refused.stderr
        refused_removal = metadata_quorum(cluster, "remove-controller", "--controller-id", str(frozen),
                                          "--controller-directory-id", directory_of(status, frozen), "--force",
                                          bootstrap_ids=[leader])
        assert refused_removal.returncode == 1
        assert "Error: RemoveRaftVoter: REQUEST_TIMED_OUT" in refused_removal.stderr
        during = describe_status(cluster, bootstrap_ids=[leader])
        assert voter_ids(during) == pending
        assert 4 in [o["id"] for o in during["currentObservers"]]
        assert during["highWatermark"] == high_watermark  # nothing committed meanwhile
    finally:
        cluster.signal(frozen, signal.SIGCONT)
        try:
            removal.communicate(timeout=60)
        finally:
            if removal.poll() is None:
                removal.kill()
                removal.communicate()

    # Once the removal commits, the same add is accepted: the refusal was only about the pending change.
    wait_for(lambda: describe_status(cluster, bootstrap_ids=[leader])["highWatermark"] > high_watermark,
             timeout_s=60, what="the removal to commit")
    _add(cluster, 4, [leader])
    assert voter_ids(describe_status(cluster, bootstrap_ids=[leader])) == sorted([leader, frozen, 4])


def test_a_voter_that_moved_to_another_port_updates_its_endpoint(three_voters: ProcessCluster) -> None:
    # UpdateRaftVoter end to end: the restarted voter finds its recorded endpoint stale and asks
    # the leader to record the new one; every voter learns it from the committed VotersRecord.
    cluster = three_voters
    leader = cluster.wait_for_leader()
    _append(cluster, ["before-move"])
    moved = next(n for n in (1, 2, 3) if n != leader)
    node = cluster.nodes[moved]
    old_endpoint = f"CONTROLLER://{HOST}:{node.port}"
    cluster.stop(moved)
    (node.port,) = free_loopback_ports(1)
    new_endpoint = f"CONTROLLER://{HOST}:{node.port}"
    for each in cluster.nodes.values():
        cluster.write_config(each)
    cluster.start(moved)

    def endpoints_of(status: dict[str, Any]) -> list[str]:
        return next(v.get("endpoints", []) for v in status["currentVoters"] if v["id"] == moved)

    wait_for(lambda: endpoints_of(describe_status(cluster, bootstrap_ids=[leader])) == [new_endpoint],
             timeout_s=60, what=f"controller {moved}'s new endpoint in the voter set")
    status = describe_status(cluster, bootstrap_ids=[leader])
    assert voter_ids(status) == [1, 2, 3]
    assert old_endpoint not in json.dumps(status)
    # The update is in the replicated log: the next leader reports it too, and the quorum still works.
    cluster.kill(leader)
    survivors = [n for n in (1, 2, 3) if n != leader]
    new_leader = cluster.wait_for_leader(survivors)
    assert endpoints_of(describe_status(cluster, bootstrap_ids=[new_leader])) == [new_endpoint]
    _append(cluster, ["after-move"], node_ids=survivors)
    wait_for(lambda: _entries(cluster, moved)[:2] == ["before-move", "after-move"], timeout_s=60,
             what="the moved voter to apply both entries")


# -- voter changes under client load, on the quorum controller -------------------------------------

def _endpoint_is(cluster: ProcessCluster, node_id: int, endpoint: str, leader: int) -> bool:
    status = describe_status(cluster, bootstrap_ids=[leader])
    return any(v["id"] == node_id and v.get("endpoints") == [endpoint] for v in status["currentVoters"])


def _voters_are(cluster: ProcessCluster, expected: list[int], leader: int) -> bool:
    return voter_ids(describe_status(cluster, bootstrap_ids=[leader])) == expected


async def _create_topics_until(stop: asyncio.Event, address: tuple[str, int]) -> tuple[list[str], list[str]]:
    """A client creating one topic after another on the active controller until `stop`; every
    answer but success is a failure (no retry hides a NOT_CONTROLLER or a timeout)."""
    created: list[str] = []
    failed: list[str] = []
    connection = KafkaConnection(*address, config=ConnectionConfig(client_id="create-topics-load",
                                                                   request_timeout_ms=30000))
    await connection.connect(timeout_ms=5000)
    try:
        while not stop.is_set():
            name = f"load-{len(created) + len(failed)}"
            try:
                response = await connection.send(CreateTopicsRequest(
                    topics=(CreatableTopic(name=TopicName(name), num_partitions=i32(1), replication_factor=i16(3),
                                           assignments=(), configs=()),),
                    timeout=i32Timedelta.parse(datetime.timedelta(seconds=30)), validate_only=False,
                ), timeout_ms=30000)
            except (KafkaProtocolError, OSError) as error:
                failed.append(f"{name}: {type(error).__name__}: {error}")
                continue
            [result] = response.topics
            if result.error_code == ErrorCode.none:
                created.append(name)
            else:
                failed.append(f"{name}: {ErrorCode(result.error_code).name} {result.error_message}")
    finally:
        await connection.close()
    return created, failed


async def test_six_voter_changes_under_create_topics_load_keep_the_leader_and_fail_no_write(
    cluster: ProcessCluster,
) -> None:
    # KIP-853 voter changes are raft control records (VotersRecord) between the controller's
    # batches. Raft owns the offsets, so they must cost the active controller nothing: the same
    # leader in the same epoch throughout, no renounce, and every CreateTopics acknowledged.
    # Six AddRaftVoter/RemoveRaftVoter, then an UpdateRaftVoter: a follower restarted on another
    # port asks the leader to record its new endpoint.
    for node_id in (1, 2, 3, 4, 5):
        cluster.add_node(node_id)
    await asyncio.to_thread(cluster.format_initial, [1, 2, 3])
    for node_id in (4, 5):
        await asyncio.to_thread(cluster.format, node_id, "--no-initial-controllers")
    await asyncio.to_thread(cluster.start_all, [1, 2, 3, 4, 5])
    leader = await asyncio.to_thread(cluster.wait_for_leader, [1, 2, 3])
    first, second = [n for n in (1, 2, 3) if n != leader]
    async with ControllerAdmin([(HOST, cluster.nodes[n].port) for n in (1, 2, 3)], timeout_ms=30000) as admin:
        brokers = await register_brokers(cluster, admin)
        try:
            before = await asyncio.to_thread(describe_status, cluster, bootstrap_ids=[leader])
            assert before["leaderId"] == leader
            stop = asyncio.Event()
            load = asyncio.create_task(_create_topics_until(stop, (HOST, cluster.nodes[leader].port)))
            voters = {1, 2, 3}
            for change, node_id in (("add", 4), ("add", 5), ("remove", first), ("remove", 4), ("add", first),
                                    ("remove", 5)):
                status = await asyncio.to_thread(describe_status, cluster, bootstrap_ids=[leader])
                if change == "add":
                    await asyncio.to_thread(_add, cluster, node_id, [leader])
                    voters.add(node_id)
                else:
                    await asyncio.to_thread(_remove, cluster, node_id, directory_of(status, node_id), [leader])
                    voters.discard(node_id)
                await asyncio.to_thread(
                    wait_for, functools.partial(_voters_are, cluster, sorted(voters), leader), timeout_s=60,
                    what=f"{change} controller {node_id}",
                )
            moved = cluster.nodes[second]
            await asyncio.to_thread(cluster.stop, second)
            (moved.port,) = free_loopback_ports(1)
            for each in cluster.nodes.values():
                cluster.write_config(each)
            await asyncio.to_thread(cluster.start, second)
            await asyncio.to_thread(
                wait_for, functools.partial(_endpoint_is, cluster, second, f"CONTROLLER://{HOST}:{moved.port}", leader),
                timeout_s=60, what=f"controller {second}'s new endpoint in the voter set (UpdateRaftVoter)",
            )
            # The load goes on a little after the last change, then stops.
            await asyncio.sleep(1)
            stop.set()
            created, failed = await load
            after = await asyncio.to_thread(describe_status, cluster, bootstrap_ids=[leader])
        finally:
            await stop_all(brokers)
        assert failed == []
        assert len(created) >= 6, created
        assert (after["leaderId"], after["leaderEpoch"]) == (leader, before["leaderEpoch"])
        assert voter_ids(after) == [1, 2, 3] and second in voter_ids(after)
        # The active controller never renounced: activated once, still active, nothing in its log.
        assert await asyncio.to_thread(controller_metric, cluster, leader, "newactivecontrollerscount") == 1
        assert await asyncio.to_thread(controller_metric, cluster, leader, "activecontrollercount") == 1
        log = cluster.log(leader)
        assert "renounc" not in log and "Raft placed the batch" not in log
        # Every acknowledged topic is in the committed metadata.
        metadata = await fetch_metadata(admin, *created)
        assert sorted(t.name for t in metadata.topics if t.error_code == ErrorCode.none) == sorted(created)


def _finalized_kraft_version(cluster: ProcessCluster, node_id: int) -> int:
    described = kraft_tool("features", "--bootstrap-controller", cluster.nodes[node_id].address, "describe", check=True)
    [line] = [line for line in described.stdout.splitlines() if line.startswith("Feature: kraft.version\t")]
    return int(line.split("FinalizedVersionLevel: ")[1].split("\t")[0])


def test_kraft_version_0_to_1_on_a_live_static_quorum_through_update_features(cluster: ProcessCluster) -> None:
    # `kafka-features upgrade --feature kraft.version=1` on a running quorum configured with
    # controller.quorum.voters: the active controller hands it to the raft layer, which writes the
    # KRaftVersionRecord and the first VotersRecord; voters can then be changed.
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    cluster.extra_config["controller.quorum.voters"] = ",".join(
        f"{n}@{HOST}:{cluster.nodes[n].port}" for n in (1, 2, 3))
    for node in cluster.nodes.values():
        cluster.write_config(node)
    for node_id in (1, 2, 3):
        cluster.format(node_id)
    cluster.start_all([1, 2, 3])
    cluster.wait_for_leader()
    _append(cluster, ["static"])
    assert [_finalized_kraft_version(cluster, n) for n in (1, 2, 3)] == [0, 0, 0]

    def upgrade(*flags: str) -> subprocess.CompletedProcess[str] | None:
        # Refused while the leader has not yet learned every voter's directory id from its Fetches.
        result = kraft_tool("features", "--bootstrap-controller", cluster.bootstrap_servers(), "upgrade",
                            "--feature", "kraft.version=1", *flags)
        return result if result.returncode == 0 else None

    dry_run = wait_for(lambda: upgrade("--dry-run"), timeout_s=60, what="a dry run of the kraft.version upgrade")
    assert dry_run.stdout == "kraft.version can be upgraded to 1.\n"
    assert [_finalized_kraft_version(cluster, n) for n in (1, 2, 3)] == [0, 0, 0]
    upgraded = wait_for(upgrade, timeout_s=60, what="the kraft.version upgrade")
    assert upgraded.stdout == "kraft.version was upgraded to 1.\n"
    wait_for(lambda: all(_finalized_kraft_version(cluster, n) == 1 for n in (1, 2, 3)), timeout_s=60,
             what="kraft.version 1 on every controller")

    # Dynamic now: a follower is removed through RemoveRaftVoter, and the controller keeps writing.
    leader = cluster.wait_for_leader()
    status = describe_status(cluster)
    follower = next(n for n in (1, 2, 3) if n != leader)
    _remove(cluster, follower, directory_of(status, follower), [1, 2, 3])
    remaining = [n for n in (1, 2, 3) if n != follower]
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=remaining)) == remaining, timeout_s=60,
             what=f"controller {follower} to leave the voter set")
    _append(cluster, ["dynamic"], node_ids=remaining)
    for node_id in remaining:
        wait_for(lambda n=node_id: _entries(cluster, n) == ["static", "dynamic"], timeout_s=60,
                 what=f"controller {node_id} to hold both entries")
