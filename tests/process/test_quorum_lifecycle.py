"""Three real controller processes: election, commits, crashes, pauses, graceful stops, restarts."""

from __future__ import annotations

import json
import signal

import pytest
from quorum_processes import ProcessCluster, kraft, wait_for

pytestmark = pytest.mark.process


def _committed_everywhere(cluster: ProcessCluster, node_ids: list[int], values: list[str]) -> bool:
    for node_id in node_ids:
        held = [value for _, value in cluster.entries(node_id)]
        if held[: len(values)] != values:
            return False
    return True


def test_three_controllers_elect_a_leader_and_commit(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    first = cluster.append(["alpha", "beta"])
    second = cluster.append(["gamma"])
    assert second["offset"] > first["offset"]
    wait_for(lambda: _committed_everywhere(cluster, [1, 2, 3], ["alpha", "beta", "gamma"]), timeout_s=60,
             what="every controller to apply the committed entries")
    followers = [n for n in (1, 2, 3) if n != leader]
    refused = cluster.http(followers[0], "/kraftwerk/test/append", body={"values": ["x"]})
    assert refused is not None and refused[0] == 421
    assert refused[1]["error"] == "NOT_LEADER" and refused[1]["leader_id"] == leader

    status = kraft("metadata-quorum", "--bootstrap-controller", cluster.bootstrap_servers([followers[0]]),
                   "describe", "--status", check=True).stdout
    lines = dict(line.split(":", 1) for line in status.splitlines())
    assert lines["ClusterId"].strip() == cluster.cluster_id
    assert int(lines["LeaderId"]) == leader
    for node_id in (1, 2, 3):
        assert f'"id": {node_id}, "directoryId": ' in lines["CurrentVoters"]
        assert f"CONTROLLER://127.0.0.1:{cluster.nodes[node_id].port}" in lines["CurrentVoters"]
    assert lines["CurrentObservers"].strip() == "[]"

    replication = kraft("metadata-quorum", "--bootstrap-controller", cluster.bootstrap_servers(),
                        "describe", "--replication", check=True).stdout.splitlines()
    assert replication[0].split() == ["NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
                                      "LastCaughtUpTimestamp", "Status"]
    assert replication[1].split()[0] == str(leader) and replication[1].split()[-1] == "Leader"
    assert sorted(row.split()[-1] for row in replication[2:]) == ["Follower", "Follower"]

    document = json.loads(kraft("metadata-quorum", "--bootstrap-controller", cluster.bootstrap_servers(),
                                "describe", "--status", "--output", "json", check=True).stdout)
    assert document["leaderId"] == leader
    assert document["highWatermark"] >= second["offset"] + 1
    assert sorted(v["id"] for v in document["currentVoters"]) == [1, 2, 3]

    metrics = cluster.http_text(leader, "/metrics")
    assert f"kafka_raft_current_leader {float(leader)}" in metrics
    assert 'kafka_raft_current_state{state="leader"} 1.0' in metrics
    assert "kafka_raft_commit_latency_avg" in metrics and "kafka_raft_append_records_total" in metrics
    assert 'kafka_network_requests_total{listener="CONTROLLER",request="Fetch"}' in metrics
    follower_metrics = cluster.http_text(followers[0], "/metrics")
    assert 'kafka_raft_current_state{state="follower"} 1.0' in follower_metrics
    assert cluster.http(leader, "/healthz") == (200, {"status": "serving"})
    for node_id in (1, 2, 3):
        ready = cluster.http(node_id, "/readyz")
        assert ready is not None and ready[0] == 200, ready


def test_kill_9_of_the_leader_loses_no_committed_entry(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    old_leader = cluster.wait_for_leader()
    old_epoch = cluster.status_of(old_leader)["epoch"]
    committed = [f"before-{i}" for i in range(20)]
    for value in committed:
        cluster.append([value])
    cluster.kill(old_leader)

    survivors = [n for n in (1, 2, 3) if n != old_leader]
    new_leader = cluster.wait_for_leader(survivors)
    assert cluster.status_of(new_leader)["epoch"] > old_epoch
    after = cluster.append(["after-crash"], node_ids=survivors)
    assert after["epoch"] > old_epoch
    wait_for(lambda: _committed_everywhere(cluster, survivors, [*committed, "after-crash"]), timeout_s=60,
             what="the survivors to hold every committed entry")

    cluster.start(old_leader)
    wait_for(lambda: _committed_everywhere(cluster, [old_leader], [*committed, "after-crash"]), timeout_s=60,
             what="the restarted old leader to catch up")
    assert cluster.status_of(old_leader)["role"] in ("Follower", "Leader")


def test_a_paused_leader_steps_down_and_no_two_leaders_share_an_epoch(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    paused = cluster.wait_for_leader()
    cluster.append(["before-pause"])
    leaders_by_epoch: dict[int, set[int]] = {}

    def observe(node_ids: list[int] | None = None) -> None:
        for node_id, status in cluster.statuses(node_ids).items():
            if status["role"] == "Leader":
                leaders_by_epoch.setdefault(status["epoch"], set()).add(node_id)

    observe()
    cluster.signal(paused, signal.SIGSTOP)
    others = [n for n in (1, 2, 3) if n != paused]
    # After controller.quorum.fetch.timeout.ms without a Fetch answered, the others elect a new leader.
    new_leader = cluster.wait_for_leader(others)
    cluster.append(["while-paused"], node_ids=others)
    # A stopped process changes nothing, and would only keep the HTTP call waiting.
    observe(others)
    cluster.signal(paused, signal.SIGCONT)

    def stepped_down() -> bool:
        observe()
        status = cluster.status(paused)
        return status is not None and status["role"] != "Leader" and status["leader_id"] == new_leader

    wait_for(stepped_down, timeout_s=60, what="the resumed old leader to step down")
    wait_for(lambda: _committed_everywhere(cluster, [1, 2, 3], ["before-pause", "while-paused"]), timeout_s=60,
             what="the old leader to catch up after resuming")
    for epoch, leaders in leaders_by_epoch.items():
        assert len(leaders) == 1, f"epoch {epoch} had leaders {leaders}"


def test_sigterm_stops_gracefully_and_the_leader_hands_over(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    cluster.append(["kept"])
    assert cluster.stop(leader) == 0
    others = [n for n in (1, 2, 3) if n != leader]
    cluster.wait_for_leader(others)
    log = cluster.log(leader)
    assert f"Node {leader} is now Resigned" in log
    assert f"Controller {leader} stopped" in log
    cluster.start(leader)
    wait_for(lambda: _committed_everywhere(cluster, [leader], ["kept"]), timeout_s=60,
             what="the restarted controller to hold the committed entry")
