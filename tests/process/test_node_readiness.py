"""`/readyz` on real processes: an orchestrator routes to, and rolls past, only nodes that say ready.

Ready means a leader is known and this node is caught up: the leader itself, or a follower whose
last successful Fetch is within controller.quorum.fetch.timeout.ms and whose log end reached the
high watermark. `/healthz` stays 200 throughout: the process serves, it is just not ready.
"""

from __future__ import annotations

import signal
from functools import partial
from typing import Any

import pytest
from quorum_processes import ProcessCluster, wait_for

pytestmark = pytest.mark.process


def _readiness(cluster: ProcessCluster, node_id: int) -> tuple[int, Any]:
    answer = cluster.http(node_id, "/readyz")
    if answer is None:
        raise AssertionError(f"controller {node_id} did not answer /readyz")
    return answer


def _answers(cluster: ProcessCluster, node_id: int, status: int) -> dict[str, Any] | None:
    code, body = _readiness(cluster, node_id)
    return dict(body) if code == status else None


def test_a_lone_voter_is_not_ready_until_a_quorum_elects_a_leader(cluster: ProcessCluster) -> None:
    for node_id in (1, 2, 3):
        cluster.add_node(node_id)
    cluster.format_initial([1, 2, 3])
    cluster.start(1)
    # One of three voters can never win an election: no leader, so never ready.
    assert _readiness(cluster, 1) == (503, {"ready": False, "reason": "no leader known"})
    assert cluster.http(1, "/healthz") == (200, {"status": "serving"})
    cluster.start(2)
    leader = cluster.wait_for_leader([1, 2])
    for node_id in (1, 2):
        wait_for(partial(_answers, cluster, node_id, 200), timeout_s=60, what=f"controller {node_id} to be ready")
    assert _readiness(cluster, leader) == (200, {"ready": True, "reason": "leader"})


def test_a_follower_whose_leader_stopped_answering_is_not_ready(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader()
    cluster.append(["committed"])
    follower, other = [n for n in (1, 2, 3) if n != leader]
    wait_for(lambda: _answers(cluster, follower, 200), timeout_s=60, what="the follower to be ready")
    assert _readiness(cluster, follower)[1] == {"ready": True, "reason": "caught up"}
    # With the other follower dead and the leader frozen, nobody can be elected: the follower
    # still knows its leader but has not fetched from it within the fetch timeout.
    cluster.kill(other)
    cluster.signal(leader, signal.SIGSTOP)
    try:
        body = wait_for(lambda: _answers(cluster, follower, 503), timeout_s=60, what="the follower to be unready")
        assert body == {
            "ready": False,
            "reason": "no successful fetch from the leader within controller.quorum.fetch.timeout.ms",
        }
        assert cluster.http(follower, "/healthz") == (200, {"status": "serving"})
    finally:
        cluster.signal(leader, signal.SIGCONT)
    # The two live voters form a quorum again (the old leader, or the follower after an election).
    wait_for(lambda: _answers(cluster, follower, 200), timeout_s=60, what="the follower to be ready again")
    cluster.append(["after-resume"], node_ids=[leader, follower])
