"""A node of another cluster is named: both sides log, rate-limited, one line naming the peer's node
id, its address and both cluster ids, and a metric counts the refusals per peer.

Controller 3's directories are re-stamped with another cluster.id (as a disk from the wrong
cluster would be); it starts, is refused by controllers 1 and 2, and never joins.
"""

from __future__ import annotations

import re

import pytest
from quorum_processes import HOST, ProcessCluster, wait_for

pytestmark = pytest.mark.process


def _lines(text: str, pattern: str) -> list[str]:
    return [line for line in text.splitlines() if re.search(pattern, line)]


def test_a_node_of_another_cluster_is_named_on_both_sides_and_counted(three_voters: ProcessCluster) -> None:
    cluster = three_voters
    leader = cluster.wait_for_leader([1, 2, 3])
    if leader == 3:
        # Let 1 or 2 lead, so the refused node is a follower trying to get back in.
        cluster.stop(3)
        leader = cluster.wait_for_leader([1, 2])
    else:
        cluster.stop(3)
    ours = cluster.cluster_id
    theirs = cluster.random_uuid()
    meta = cluster.nodes[3].data_dir / "meta.properties"
    meta.write_text(meta.read_text().replace(f"cluster.id={ours}", f"cluster.id={theirs}"))
    cluster.start(3)

    refused = rf"INCONSISTENT_CLUSTER_ID: its cluster id is '{ours}', ours is '{theirs}'"
    wait_for(lambda: _lines(cluster.log(3), refused), timeout_s=60, what="controller 3 to name the refusing peer")
    inbound = rf"from node 3 at {re.escape(HOST)}:\d+ with INCONSISTENT_CLUSTER_ID: its cluster id is '{theirs}', ours is '{ours}'"
    wait_for(lambda: _lines(cluster.log(leader), inbound), timeout_s=60, what=f"controller {leader} to name node 3")

    # The refused side: ERROR lines naming the peer's id and address and both ids.
    [line, *_] = _lines(cluster.log(3), refused)
    assert " ERROR " in line and re.search(rf"Node [12] at {re.escape(HOST)}:\d+ refused our \w+Request", line)
    # The refusing side: WARN, and a counter per peer.
    assert all(" WARNING " in line for line in _lines(cluster.log(leader), inbound))
    metrics = cluster.http_text(leader, "/metrics")
    [count] = re.findall(
        r'kraftwerk_raft_inconsistent_cluster_id_total\{direction="inbound",peer="3"\} (\S+)', metrics
    )
    assert float(count) >= 1
    # Rate-limited: node 3 keeps retrying; once the counter shows three more refusals (all within
    # one 30 s window of the first line), the logs still hold one line per peer and direction.
    def refusals() -> float:
        [value] = re.findall(
            r'kraftwerk_raft_inconsistent_cluster_id_total\{direction="inbound",peer="3"\} (\S+)',
            cluster.http_text(leader, "/metrics"),
        )
        return float(value)

    wait_for(lambda: refusals() >= float(count) + 3, timeout_s=25, what="three more refusals of node 3")
    assert len(_lines(cluster.log(leader), inbound)) == 1
    for peer in (1, 2):
        assert len(_lines(cluster.log(3), rf"Node {peer} at .* refused our")) <= 1
    # And it never joined: the quorum's voters still see it as not caught up.
    assert cluster.status_of(3)["cluster_id"] == theirs
