"""A voter whose metadata log directory is lost (meta.properties kept) refuses to start, and the
steps its one line prints bring it back: formatted as a new directory, started as an observer,
swapped into the voter set. The test runs the printed commands as printed (only the placeholder
for a live controller is filled in) and checks the node is a voter again with no entry lost.
"""

from __future__ import annotations

import re
import shlex
import shutil

import pytest
from quorum_processes import (
    ProcessCluster,
    describe_status,
    directory_of,
    kraft_tool,
    start_refused,
    voter_ids,
    wait_for,
)

pytestmark = pytest.mark.process


def _step(line: str, number: int) -> list[str]:
    match = re.search(rf"\({number}\) (kraft [^;]*?)(?: \(|;|\.$)", line)
    assert match is not None, f"step ({number}) not found in: {line}"
    return shlex.split(match.group(1))


def test_a_lost_metadata_log_is_refused_and_the_printed_steps_bring_the_voter_back(
    three_voters: ProcessCluster,
) -> None:
    cluster = three_voters
    acknowledged = [f"before-{i}" for i in range(30)]
    for start in range(0, 30, 10):
        cluster.append(acknowledged[start : start + 10])
    old_directory = directory_of(describe_status(cluster), 3)
    cluster.stop(3)
    shutil.rmtree(cluster.nodes[3].data_dir / "__cluster_metadata-0")
    more = [f"while-lost-{i}" for i in range(10)]
    cluster.append(more, node_ids=[1, 2])
    acknowledged += more

    line = start_refused(cluster.nodes[3].config_path)
    assert "A voter that lost its log has forgotten its votes and must not vote again" in line
    live = cluster.bootstrap_servers([1, 2])

    # (1) format as a new directory
    formatted = kraft_tool(*_step(line, 1)[1:], check=True)
    assert "formatting it as a new directory" in formatted.stdout
    # (2) start: it joins as an observer with a new directory id and catches up
    assert _step(line, 2)[:3] == ["kraft", "server", "start"]
    cluster.start(3)
    status = wait_for(lambda: (s := describe_status(cluster, bootstrap_ids=[1, 2])) and
                      any(o["id"] == 3 for o in s["currentObservers"]) and s, timeout_s=60,
                      what="node 3 to be an observer")
    [new_directory] = [str(o["directoryId"]) for o in status["currentObservers"] if o["id"] == 3]
    assert new_directory != old_directory
    # The old (id, directory) is still a voter: the node does not vote with its new identity.
    assert voter_ids(status) == [1, 2, 3] and not cluster.status_of(3)["is_voter"]
    # (3) remove the old directory id, (4) add the new one
    remove = [arg.replace("<live-controller-host:port>", live) for arg in _step(line, 3)]
    assert remove[remove.index("--controller-directory-id") + 1] == old_directory
    kraft_tool(*remove[1:], check=True)
    add = [arg.replace("<live-controller-host:port>", live) for arg in _step(line, 4)]
    wait_for(lambda: kraft_tool(*add[1:]).returncode == 0, timeout_s=60, what="add-controller to succeed")

    def voter_again() -> bool:
        status = describe_status(cluster, bootstrap_ids=[1, 2])
        voters = {v["id"]: v["directoryId"] for v in status["currentVoters"]}
        return voters.get(3) == new_directory and cluster.status_of(3)["is_voter"]

    wait_for(voter_again, timeout_s=60, what="node 3 to be a voter with its new directory id")
    after = [f"after-{i}" for i in range(10)]
    cluster.append(after)
    acknowledged += after

    def same_entries() -> bool:
        on = {n: [v for _, v in cluster.entries(n)] for n in (1, 2, 3)}
        return on[1] == on[2] == on[3] and all(v in on[3] for v in acknowledged)

    wait_for(same_entries, timeout_s=60, what="every node to hold every acknowledged entry")
