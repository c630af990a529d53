"""What the planner is told about the world: observed facts, and the two pure ports it consults.

The runtime (Kubernetes or local) observes pods/processes, volumes and format jobs; the admin
client observes the cluster itself (DescribeQuorum, DescribeCluster, Metadata, ApiVersions'
finalized features). Both arrive here as frozen data, so a plan is a function of its arguments and
a test (or a hypothesis strategy) can build any world it likes.

`Layout` says where a node lives (hosts, ports, directories); it differs per runtime and is pure.
`ConfigRules` checks `server.properties` the way the engine does; the shell hands in the engine's
rules (`kraft_operator.config_rules`), which the planner may not import because they sit in the
node's `server` package.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

__all__ = [
    "BrokerFacts",
    "ClusterFacts",
    "ConfigRules",
    "FormatJobFacts",
    "JobPhase",
    "Layout",
    "LogDirFacts",
    "LogDirReplica",
    "NodeFacts",
    "NodeRef",
    "Observed",
    "PartitionDetail",
    "PartitionFacts",
    "PodPhase",
    "QuorumFacts",
    "ReplicaFacts",
    "ThrottleFacts",
    "VolumeFacts",
    "replication_factors",
]


@dataclass(frozen=True, slots=True, order=True)
class NodeRef:
    """One node of one cluster: what every action and fact is keyed by."""

    namespace: str
    cluster: str
    pool: str
    node_id: int


class PodPhase(StrEnum):
    """Kubernetes pod phases, plus Absent (no pod / no process at all)."""

    ABSENT = "Absent"
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


class JobPhase(StrEnum):
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class VolumeFacts:
    """One volume (PVC or local directory) of a node as it exists. `cluster_id` is None while the
    volume holds no `meta.properties` (not formatted)."""

    volume_id: int
    path: str
    cluster_id: str | None = None
    node_id: int | None = None
    directory_id: str | None = None
    size_bytes: int | None = None  # what the volume holds (a PVC's status.capacity)
    requested_bytes: int | None = None  # what its claim asks for (a PVC's spec); None where volumes have no size

    @property
    def formatted(self) -> bool:
        return self.cluster_id is not None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """A node's pod (or local process), its volumes and the config it was given.

    `volumes` lists the volumes that exist; a volume of the spec that is missing is simply absent.
    `config` is the rendered server.properties as currently stored (ConfigMap or file), None when
    there is none. `ready` is the runtime's readiness (the process answers on its listeners).
    `started_revision` is the revision (`plan.roll.node_revision`) the running pod/process was
    started with, None when unknown; `restart_requested` is the manual-roll annotation on the pod;
    `started_at_ms` when the running process started (a voter counts as caught up only after it)."""

    node_id: int
    pool: str
    phase: PodPhase = PodPhase.ABSENT
    volumes: tuple[VolumeFacts, ...] = ()
    config: Mapping[str, str] | None = None
    ready: bool = False
    exit_code: int | None = None
    message: str = ""
    version: str | None = None
    restarts: int = 0
    started_revision: str | None = None
    restart_requested: bool = False
    started_at_ms: int | None = None

    def volume(self, volume_id: int) -> VolumeFacts | None:
        return next((v for v in self.volumes if v.volume_id == volume_id), None)

    def halted_on(self, path: str) -> str | None:
        """The node's last words when its process stopped with an error naming `path` (its
        metadata log directory failed an I/O: the node halts, as Kafka's does, and a restart only
        halts again), else None. Seen as an exit with a non-zero code while not ready (a failed
        process, or a crash-looping pod's last termination), whose message names the directory."""
        if self.ready or self.exit_code in (None, 0) or not path:
            return None
        return self.message if path.rstrip("/") in self.message else None


@dataclass(frozen=True, slots=True)
class FormatJobFacts:
    """A format Job (`kraft storage format` run) for one node. `directory_ids` maps each directory it
    formatted to the directory id it wrote (the Job's termination message)."""

    node_id: int
    phase: JobPhase
    message: str = ""
    directory_ids: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReplicaFacts:
    replica_id: int
    directory_id: str
    log_end_offset: int
    last_caught_up_timestamp_ms: int = -1
    endpoints: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QuorumFacts:
    """DescribeQuorum's answer from the leader. `answered_at_ms`: when it came (wall clock), the
    moment its replicas' last caught-up times are to be measured from (None: the plan's now)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaFacts, ...] = ()
    observers: tuple[ReplicaFacts, ...] = ()
    answered_at_ms: int | None = None


@dataclass(frozen=True, slots=True)
class BrokerFacts:
    broker_id: int
    fenced: bool


@dataclass(frozen=True, slots=True)
class PartitionFacts:
    """From Metadata on a broker: partition counts, and the largest replication factor of any topic
    (the fewest brokers the cluster can run with; see `replication_factors`)."""

    total: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    offline: int = 0
    max_replication_factor: int = 0


@dataclass(frozen=True, slots=True)
class PartitionDetail:
    """One partition as Metadata reports it, with its topic's effective min.insync.replicas
    (DescribeConfigs): what the broker-restart gates are decided on."""

    topic: str
    partition: int
    leader_id: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    min_isr: int = 1


def replication_factors(details: Iterable[PartitionDetail]) -> dict[str, int]:
    """Each topic's replication factor: the fewest replicas any of its partitions lists. Metadata
    lists a partition under reassignment with its adding and removing replicas together, so the
    largest count would overstate it while a drain is moving the partition."""
    factors: dict[str, int] = {}
    for p in details:
        factors[p.topic] = min(factors.get(p.topic, len(p.replicas)), len(p.replicas))
    return factors


@dataclass(frozen=True, slots=True)
class LogDirReplica:
    """One replica a log directory holds (DescribeLogDirs): `future` for the copy an
    AlterReplicaLogDirs move is filling there."""

    topic: str
    partition: int
    size_bytes: int = 0
    future: bool = False


@dataclass(frozen=True, slots=True)
class LogDirFacts:
    """One log directory as its broker describes it (DescribeLogDirs): `error` is Kafka's error
    name (KAFKA_STORAGE_ERROR for an offline directory) or None; sizes are -1 where unknown;
    `replicas` the replicas (current and future) it holds."""

    path: str
    error: str | None = None
    total_bytes: int = -1
    usable_bytes: int = -1
    replicas: tuple[LogDirReplica, ...] = ()


@dataclass(frozen=True, slots=True)
class ThrottleFacts:
    """The replication throttles set as dynamic configs: each answering broker's own
    `leader/follower.replication.throttled.rate` (only those set for it, DescribeConfigs source
    DYNAMIC_BROKER_CONFIG), and each topic's non-empty `leader/follower.replication.throttled.replicas`.
    A broker that did not answer is absent from `broker_rates`."""

    broker_rates: Mapping[int, Mapping[str, str]] = field(default_factory=dict)
    topic_replicas: Mapping[str, Mapping[str, str]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClusterFacts:
    """What the cluster says about itself through the admin client. Every part is None when it
    could not be learned this time (no leader yet, no broker up); `errors` says why."""

    cluster_id: str | None = None
    quorum: QuorumFacts | None = None
    brokers: Mapping[int, BrokerFacts] | None = None
    partitions: PartitionFacts | None = None
    finalized_metadata_version: str | None = None
    errors: tuple[str, ...] = ()
    partition_details: tuple[PartitionDetail, ...] | None = None
    supported_metadata_versions: Mapping[int, tuple[int, int]] | None = None  # node id -> (min, max) level
    # broker id -> its log directories (DescribeLogDirs); a broker that did not answer is absent
    log_dirs: Mapping[int, tuple[LogDirFacts, ...]] | None = None
    throttles: ThrottleFacts | None = None

    def log_dir(self, node_id: int, path: str) -> LogDirFacts | None:
        """The broker's own account of its directory `path` (DescribeLogDirs), if it gave one."""
        wanted = path.rstrip("/")
        return next((d for d in (self.log_dirs or {}).get(node_id, ()) if d.path.rstrip("/") == wanted), None)

    def offline_log_dir(self, node_id: int, path: str) -> str | None:
        """Kafka's error for a directory its broker reports offline (KAFKA_STORAGE_ERROR), else None."""
        described = self.log_dir(node_id, path)
        return described.error if described is not None else None


@dataclass(frozen=True, slots=True)
class Observed:
    """Everything observed for one cluster in one reconcile."""

    nodes: Mapping[int, NodeFacts] = field(default_factory=dict)
    format_jobs: Mapping[int, FormatJobFacts] = field(default_factory=dict)
    cluster: ClusterFacts | None = None
    # node id -> a digest of the TLS material the node would start with now (its Secret); part of
    # the node's revision, so renewed material rolls the node. Empty without spec.tls.
    tls_revisions: Mapping[int, str] = field(default_factory=dict)


class Layout(Protocol):
    """Where a runtime puts a node. Pure: the same node always gets the same answers."""

    def advertised_host(self, node: NodeRef) -> str:
        """The host other nodes and clients use to reach the node."""
        ...

    def bind_host(self, node: NodeRef) -> str:
        """The host the node's listeners bind (empty: every interface)."""
        ...

    def port(self, node: NodeRef, *, listener: str, spec_port: int) -> int:
        """The node's port for a listener (`CONTROLLER` or a spec listener) whose spec port is given."""
        ...

    def volume_path(self, node: NodeRef, *, volume_id: int) -> str:
        """The log directory of one of the node's volumes, as the node sees it."""
        ...

    def metrics_port(self, node: NodeRef) -> int | None:
        """The port of the engine's /metrics endpoint (`kraftwerk.metrics.port`), None for none."""
        ...

    def tls_dir(self, node: NodeRef) -> str:
        """Where the node reads its TLS material (its Secret, mounted), as the node sees it."""
        ...

    def certificate_hosts(self, node: NodeRef) -> tuple[str, ...]:
        """The names and addresses the node's certificate carries as subject alternative names:
        every host a client or another node may dial it by."""
        ...


class ConfigRules(Protocol):
    """The engine's config rules, handed in by the shell."""

    def override_problem(self, key: str, value: str) -> str | None:
        """Why `key=value` is refused as a cluster-wide override (unknown key, invalid value)."""
        ...

    def node_problem(self, properties: Mapping[str, str]) -> str | None:
        """Why a whole rendered server.properties is refused, as the node would refuse it."""
        ...
