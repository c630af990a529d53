"""A simulated world for the planner's tests: it performs a plan's actions on in-memory nodes and
answers with the facts a real runtime and admin client would report.

It is deliberately strict where the real world is unforgiving: formatting a directory that is
already formatted is recorded as a violation (the property tests assert there are none), a node
started without a formatted volume or a config fails, and a broker only registers once a quorum
of the initial controllers runs. Faults are explicit methods (`lose_volume`, `crash`,
`fail_next_format`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kraft_operator.model import KRaftCluster, KRaftClusterStatus
from kraft_operator.plan import (
    Action,
    BrokerFacts,
    ClusterFacts,
    FormatJobFacts,
    FormatStorage,
    JobPhase,
    NodeFacts,
    Observed,
    PartitionFacts,
    PodPhase,
    QuorumBootstrap,
    QuorumFacts,
    ReplicaFacts,
    StartNode,
    VolumeFacts,
    WriteConfig,
)


@dataclass
class _Node:
    node_id: int
    pool: str
    roles: frozenset[str] = frozenset()
    config: dict[str, str] | None = None
    volumes: dict[int, VolumeFacts] = field(default_factory=dict)
    phase: PodPhase = PodPhase.ABSENT
    bootstrap: QuorumBootstrap | None = None


@dataclass
class World:
    rng: random.Random
    nodes: dict[int, _Node] = field(default_factory=dict)
    jobs: dict[int, FormatJobFacts] = field(default_factory=dict)
    formatted_dirs: dict[str, int] = field(default_factory=dict)  # path -> times formatted
    violations: list[str] = field(default_factory=list)
    fail_formats: set[int] = field(default_factory=set)
    max_replication_factor: int = 0
    log: list[str] = field(default_factory=list)
    initial_values: set[str] = field(default_factory=set)  # every --initial-controllers value used
    cluster_ids: set[str] = field(default_factory=set)  # every cluster id formatted with

    # -- the runtime ---------------------------------------------------------------------------
    def apply(self, action: Action) -> None:
        node_id = action.node.node_id
        node = self.nodes.setdefault(node_id, _Node(node_id, action.node.pool))
        self.log.append(f"{type(action).__name__} {node_id}")
        if isinstance(action, WriteConfig):
            node.config = action.as_dict()
            node.roles = frozenset(r.value for r in action.roles)
        elif isinstance(action, FormatStorage):
            self._format(node, action)
        elif isinstance(action, StartNode):
            if node.config is None or len(node.volumes) == 0 or not all(v.formatted for v in node.volumes.values()):
                node.phase = PodPhase.FAILED
            else:
                node.phase = PodPhase.RUNNING

    def _disk(self, node_id: int) -> str:
        """The directory id of the node's first volume (a voter's ReplicaKey names it), or "dir"."""
        node = self.nodes.get(node_id)
        volume = min(node.volumes.items())[1] if node is not None and node.volumes else None
        return volume.directory_id if volume is not None and volume.directory_id else "dir"

    def _format(self, node: _Node, action: FormatStorage) -> None:
        if node.config is None:
            self.violations.append(f"node {node.node_id} formatted without a config")
        if node.node_id in self.fail_formats:
            # A failed format writes nothing (this world's failure model), so its ids bind nothing.
            self.fail_formats.discard(node.node_id)
            self.jobs[node.node_id] = FormatJobFacts(node.node_id, JobPhase.FAILED, "disk full")
            return
        self.cluster_ids.add(action.cluster_id)
        if action.bootstrap is QuorumBootstrap.INITIAL and action.initial_controllers is not None:
            self.initial_values.add(action.initial_controllers)
        wrote: dict[str, str] = {}
        for index, path in enumerate(action.directories):
            volume_id = int(path.rsplit("/", 1)[1])
            existing = node.volumes.get(volume_id)
            if existing is not None and existing.formatted:
                if not action.ignore_formatted:
                    self.violations.append(f"format of formatted {path} without --ignore-formatted")
                continue
            self.formatted_dirs[path] = self.formatted_dirs.get(path, 0) + 1
            if self.formatted_dirs[path] > 1:
                self.violations.append(f"{path} formatted twice")
            directory_id = f"{self.rng.getrandbits(64):022x}"[:22]
            if index == 0 and action.bootstrap is QuorumBootstrap.INITIAL and action.initial_controllers:
                for entry in action.initial_controllers.split(","):
                    voter, _, rest = entry.partition("@")
                    if int(voter) == node.node_id:
                        directory_id = rest.rsplit(":", 1)[1]
            node.volumes[volume_id] = VolumeFacts(volume_id, path, action.cluster_id, node.node_id, directory_id)
            wrote[path] = directory_id
        node.bootstrap = action.bootstrap
        self.jobs[node.node_id] = FormatJobFacts(node.node_id, JobPhase.SUCCEEDED, "", wrote)

    # -- faults --------------------------------------------------------------------------------
    def crash(self, node_id: int) -> None:
        if node_id in self.nodes and self.nodes[node_id].phase is PodPhase.RUNNING:
            self.nodes[node_id].phase = PodPhase.FAILED

    def lose_volume(self, node_id: int) -> None:
        node = self.nodes.get(node_id)
        if node is not None and node.volumes:
            node.volumes.pop(min(node.volumes))
            node.phase = PodPhase.FAILED if node.phase is PodPhase.RUNNING else node.phase

    # -- observation ---------------------------------------------------------------------------
    def observe(self, cluster: KRaftCluster) -> Observed:
        facts = {
            n.node_id: NodeFacts(
                node_id=n.node_id,
                pool=n.pool,
                phase=n.phase,
                volumes=tuple(v for _, v in sorted(n.volumes.items())),
                config=dict(n.config) if n.config is not None else None,
            )
            for n in self.nodes.values()
        }
        return Observed(nodes=facts, format_jobs=dict(self.jobs), cluster=self._cluster_facts(cluster.status))

    def _cluster_facts(self, status: KRaftClusterStatus | None) -> ClusterFacts:
        initial = []
        if status is not None and status.initial_controllers:
            initial = [int(e.split("@")[0]) for e in status.initial_controllers.split(",")]
        running = [i for i in initial if i in self.nodes and self.nodes[i].phase is PodPhase.RUNNING]
        if not initial or len(running) * 2 <= len(initial):
            return ClusterFacts(errors=("no quorum leader",))
        leader = min(running)
        voters = tuple(ReplicaFacts(i, self._disk(i), 10 if i in running else 0) for i in initial)
        observers = tuple(
            ReplicaFacts(n.node_id, self._disk(n.node_id), 10)
            for n in self.nodes.values()
            if n.phase is PodPhase.RUNNING and n.node_id not in initial
        )
        brokers = {
            n.node_id: BrokerFacts(n.node_id, fenced=False)
            for n in self.nodes.values()
            if n.phase is PodPhase.RUNNING and "broker" in n.roles
        }
        return ClusterFacts(
            cluster_id=status.cluster_id if status else None,
            quorum=QuorumFacts(leader, 1, 10, voters, observers),
            brokers=brokers,
            partitions=PartitionFacts(total=3, max_replication_factor=self.max_replication_factor),
            finalized_metadata_version="4.1-IV1",
        )


def publish(cluster: KRaftCluster, status: KRaftClusterStatus) -> KRaftCluster:
    return cluster.model_copy(update={"status": status})
