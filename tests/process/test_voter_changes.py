"""KIP-853 on real processes: grow, shrink, replace a disk, and the refusals that change nothing."""

from __future__ import annotations

import json

import pytest
from quorum_processes import (
    ProcessCluster,
    describe_status,
    directory_of,
    metadata_quorum,
    voter_ids,
    wait_for,
)

pytestmark = pytest.mark.process


def _observer_caught_up(cluster: ProcessCluster, node_id: int, bootstrap_ids: list[int]) -> bool:
    rows = json.loads(metadata_quorum(cluster, "--output", "json", "describe", "--replication",
                                      bootstrap_ids=bootstrap_ids, check=True).stdout)
    return any(r["nodeId"] == node_id and r["status"] == "Observer" and r["lag"] == 0 for r in rows)


def _add(cluster: ProcessCluster, node_id: int, bootstrap_ids: list[int]) -> None:
    wait_for(lambda: _observer_caught_up(cluster, node_id, bootstrap_ids), timeout_s=20,
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
    for node_id in (1, 2, 3):
        cluster.start(node_id)
    assert cluster.wait_for_leader() == 1
    cluster.append(["one-voter"])
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
    cluster.append(["three-voters"])
    wait_for(lambda: all([v for _, v in cluster.entries(n)][:2] == ["one-voter", "three-voters"] for n in (1, 2, 3)),
             timeout_s=10, what="every voter to hold both entries")
    # The grown quorum survives the loss of its first controller.
    cluster.kill(1)
    cluster.wait_for_leader([2, 3])
    cluster.append(["after-losing-1"], node_ids=[2, 3])


def test_shrink_from_three_to_one_removing_the_leader_too(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    cluster.append(["three"])
    status = describe_status(cluster)
    follower = next(n for n in (1, 2, 3) if n != leader)
    output = _remove(cluster, follower, directory_of(status, follower), [1, 2, 3])
    assert output.startswith(f"Removed  KRaft controller {follower}") or output.startswith(
        f"Removed KRaft controller {follower}")
    remaining = [n for n in (1, 2, 3) if n != follower]
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=remaining)) == remaining, timeout_s=15,
             what="the follower to leave the voter set")

    # Now remove the current leader: it commits its own removal and resigns.
    leader = cluster.wait_for_leader(remaining)
    status = describe_status(cluster, bootstrap_ids=remaining)
    _remove(cluster, leader, directory_of(status, leader), remaining)
    last = next(n for n in remaining if n != leader)
    wait_for(lambda: cluster.leader([last]) == last, timeout_s=20, what=f"controller {last} to lead alone")
    final = describe_status(cluster, bootstrap_ids=[last])
    assert voter_ids(final) == [last]
    cluster.append(["one"], node_ids=[last])
    assert [v for _, v in cluster.entries(last)][:2] == ["three", "one"]


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
             timeout_s=15, what="the dead controller to leave the voter set")


def test_replace_a_controllers_disk(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    cluster.append(["before-replacement"])
    replaced = next(n for n in (1, 2, 3) if n != leader)
    old_directory = directory_of(describe_status(cluster), replaced)
    cluster.kill(replaced)
    import shutil

    shutil.rmtree(cluster.nodes[replaced].data_dir)
    cluster.format(replaced, "--no-initial-controllers")
    others = [n for n in (1, 2, 3) if n != replaced]
    _remove(cluster, replaced, old_directory, others)
    wait_for(lambda: voter_ids(describe_status(cluster, bootstrap_ids=others)) == others, timeout_s=15,
             what="the old disk's voter to be removed")
    cluster.start(replaced)
    _add(cluster, replaced, others)
    status = describe_status(cluster)
    assert voter_ids(status) == [1, 2, 3]
    assert directory_of(status, replaced) != old_directory
    wait_for(lambda: [v for _, v in cluster.entries(replaced)][:1] == ["before-replacement"], timeout_s=15,
             what="the new disk to be filled from the leader")
