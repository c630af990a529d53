"""The `KRaftCluster` resource (kraftwerk.io/v1alpha1, short name `kc`) as pydantic models.

These models are the single source of the resource's shape: `kraftwerk crd` generates the CRD in
`crds/` from them (`kraft_operator.crd`), the planner reads a spec and writes a status through
them, and `kraftwerk plan`/`up` parse YAML files with them. Rules the API server can check go into
the schema (bounds, patterns, enums) or into CEL (`x-kubernetes-validations`: cross-field rules
and immutability); rules only the operator can check (a `server.properties` override against the
engine's config rules, a metadata.version a node cannot run) live in `kraft_operator.plan`.

Field names are camelCase on the wire (Kubernetes convention) and snake_case in Python.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue
from pydantic.alias_generators import to_camel

__all__ = [
    "API_VERSION",
    "APPROVE_ANNOTATION",
    "MANUAL_ROLL_ANNOTATION",
    "PAUSE_ANNOTATION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "VERSION",
    "AclResource",
    "AclRule",
    "BlockerStatus",
    "CertificateAuthoritySpec",
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "DirectoryStatus",
    "Implementation",
    "KRaftCluster",
    "KRaftClusterSpec",
    "KRaftClusterStatus",
    "Lifecycle",
    "Listener",
    "ListenerCertificate",
    "LogDirMoveStatus",
    "LogDirRemovalStatus",
    "MetadataVersionStatus",
    "NodePool",
    "NodeStatus",
    "ObjectMeta",
    "OperationStatus",
    "PartitionMoveStatus",
    "PartitionsStatus",
    "PodTemplate",
    "PodTemplateMetadata",
    "QuorumReplicaStatus",
    "QuorumStatus",
    "Rack",
    "ReassignmentThrottleStatus",
    "RebalanceStatus",
    "Resources",
    "Role",
    "RollStatus",
    "RunbookStatus",
    "RunbookStepStatus",
    "ScaleDownStatus",
    "Storage",
    "TlsSpec",
    "TopicThrottleStatus",
    "UserSpec",
    "Volume",
    "VolumeReplacementStatus",
]

GROUP = "kraftwerk.io"
VERSION = "v1alpha1"
API_VERSION: Literal["kraftwerk.io/v1alpha1"] = "kraftwerk.io/v1alpha1"
KIND: Literal["KRaftCluster"] = "KRaftCluster"
PLURAL = "kraftclusters"
SHORT_NAMES = ("kc",)

# Annotations the operator reads (on the KRaftCluster; the manual roll also on one node's pod).
PAUSE_ANNOTATION = "kraftwerk.io/pause-reconciliation"
MANUAL_ROLL_ANNOTATION = "kraftwerk.io/manual-rolling-update"
APPROVE_ANNOTATION = "kraftwerk.io/approve"  # value: "<runbook>/<step>", comma-separated

# Kubernetes names (DNS-1123 labels); a pool's name becomes part of pod and PVC names.
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# A resource.Quantity as Kubernetes writes one (1Gi, 500M, 10G, 1.5Ti, 100).
_QUANTITY = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$"
# Kafka's Uuid text form: 22 characters of URL-safe base64.
_KAFKA_UUID = r"^[A-Za-z0-9_-]{22}$"
_LISTENER_NAME = r"^[A-Z][A-Z0-9_]*$"
_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_METADATA_VERSION = r"^[0-9]+\.[0-9]+(-IV[0-9]+)?$"


def _cel(
    rule: str, message: str, *, reason: str | None = None, field_path: str | None = None
) -> dict[str, JsonValue]:
    entry: dict[str, JsonValue] = {"rule": rule, "message": message}
    if reason is not None:
        entry["reason"] = reason
    if field_path is not None:
        entry["fieldPath"] = field_path
    return entry


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields refused (the CRD prunes them)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class Role(StrEnum):
    CONTROLLER = "controller"
    BROKER = "broker"


class Implementation(StrEnum):
    """What runs a pool's nodes: the kraftwerk engine (controllers and brokers), or Apache Kafka 4.1
    (the local runtime runs it from the jars of `scripts/fetch-kafka-jars`)."""

    KRAFTWERK = "kraftwerk"
    APACHE_KAFKA = "apache-kafka"


class Volume(_Model):
    """One persistent volume of a node: one log directory."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0",
                    "a volume cannot shrink",
                    field_path=".size",
                ),
                _cel(
                    "!has(oldSelf.class) || (has(self.class) && self.class == oldSelf.class)",
                    "a volume's storage class is immutable",
                    field_path=".class",
                ),
            ]
        }
    )

    id: int = Field(ge=0, le=255, description="The volume's id within the node; log dir `data-<id>`.")
    size: str = Field(pattern=_QUANTITY, max_length=32, description="Requested size, e.g. 10Gi.")
    class_: str | None = Field(
        default=None, alias="class", max_length=253, description="StorageClass; the cluster default when unset."
    )
    delete_claim: bool = Field(
        default=False, description="Delete the volume's PVC when the KRaftCluster is deleted, or when its node leaves "
        "the cluster in a scale-down (kept by default)."
    )


class Storage(_Model):
    """One volume (`single`) or several (`jbod`, one log directory per volume)."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.type == 'jbod' || size(self.volumes) == 1",
                    "storage of type single has exactly one volume; use type jbod for more",
                    field_path=".volumes",
                ),
                _cel("self.type == oldSelf.type", "storage type is immutable", field_path=".type"),
            ]
        }
    )

    type: Literal["single", "jbod"] = "single"
    volumes: list[Volume] = Field(
        min_length=1,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["id"]},
    )


class Resources(_Model):
    """Container resources, as in a Pod spec (`cpu`, `memory`, ... to quantities)."""

    requests: dict[str, str] = Field(default_factory=dict, max_length=16)
    limits: dict[str, str] = Field(default_factory=dict, max_length=16)


class Rack(_Model):
    """Rack awareness: `broker.rack` is the value of this label on the node that runs the pod."""

    topology_key: str = Field(default="topology.kubernetes.io/zone", max_length=253)


class NodePool(_Model):
    """A group of identical nodes: the same roles, storage and resources."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel("self.roles == oldSelf.roles", "a node pool's roles are immutable", field_path=".roles"),
                _cel(
                    "self.implementation == oldSelf.implementation",
                    "a node pool's implementation is immutable",
                    field_path=".implementation",
                ),
            ]
        }
    )

    name: str = Field(pattern=_DNS_LABEL, max_length=40)
    roles: list[Role] = Field(
        min_length=1, max_length=2, json_schema_extra={"x-kubernetes-list-type": "set"}
    )
    replicas: int = Field(ge=0, le=64)
    implementation: Implementation = Implementation.KRAFTWERK
    storage: Storage
    resources: Resources | None = None
    rack: Rack | None = None
    node_affinity: dict[str, Any] | None = Field(
        default=None,
        description="A Kubernetes NodeAffinity, applied to the pool's pods as written.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class ListenerCertificate(_Model):
    """A certificate of the user's own for one listener (bring your own): a Secret holding the
    certificate chain and its key in PEM. The listener presents it instead of the node's certificate
    from the cluster CA; clients then trust the user's CA."""

    secret_name: str = Field(pattern=_DNS_SUBDOMAIN, max_length=253)
    certificate: str = Field(default="tls.crt", max_length=253, description="The Secret's key holding the chain.")
    key: str = Field(default="tls.key", max_length=253, description="The Secret's key holding the private key.")


class Listener(_Model):
    """A listener for clients (and, on brokers, between brokers). The controllers' own listener is
    `CONTROLLER` on `spec.controllerPort`."""

    name: str = Field(pattern=_LISTENER_NAME, max_length=32)
    port: int = Field(ge=1024, le=65535)
    protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="Security protocol: PLAINTEXT; SSL (TLS with client certificates from the clients CA: "
        "users with authentication tls); SASL_SSL (TLS, then SCRAM-SHA-512: users with authentication "
        "scram-sha-512). SSL and SASL_SSL need spec.tls.",
    )
    certificate: ListenerCertificate | None = Field(
        default=None, description="The listener's own certificate (a Secret) instead of one from the cluster CA."
    )
    network_policy_peers: list[dict[str, Any]] | None = Field(
        default=None, max_length=32,
        description="Kubernetes NetworkPolicyPeers allowed to reach this listener (with spec.tls, the cluster's "
        "NetworkPolicy admits everyone to a listener that lists none).",
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )


class CertificateAuthoritySpec(_Model):
    """A certificate authority of the cluster: generated and renewed by the operator, or the user's
    own (`secretName`: a Secret with `ca.crt` and `ca.key`, which the operator reads and never renews)."""

    secret_name: str | None = Field(default=None, pattern=_DNS_SUBDOMAIN, max_length=253)
    validity_days: int = Field(default=365, ge=2, le=36500, description="Validity of a CA the operator generates.")
    renewal_days: int = Field(
        default=30, ge=1, le=36500,
        description="Renew the CA when it expires within this many days (a new CA, trusted beside the old one "
        "through the switch).",
    )


class TlsSpec(_Model):
    """TLS for the cluster: the controller listener and the brokers' REPLICATION listener speak SSL
    with client certificates (mTLS) between nodes and the operator; client listeners say their own
    protocol. Node certificates come from the cluster CA, user certificates from the clients CA."""

    cluster_ca: CertificateAuthoritySpec = Field(default_factory=CertificateAuthoritySpec)
    clients_ca: CertificateAuthoritySpec = Field(default_factory=CertificateAuthoritySpec)
    validity_days: int = Field(
        default=365, ge=2, le=36500, description="Validity of the node, operator and user certificates."
    )
    renewal_days: int = Field(
        default=30, ge=1, le=36500,
        description="Renew a certificate when it expires within this many days (a gated rolling restart for "
        "nodes).",
    )
    replication_port: int = Field(
        default=9091, ge=1024, le=65535,
        description="The brokers' REPLICATION listener (SSL, mTLS): inter-broker traffic and the operator.",
    )


class AclResource(_Model):
    type: Literal["topic", "group", "cluster", "transactionalId"]
    name: str = Field(default="kafka-cluster", min_length=1, max_length=249,
                      description="The resource's name, `*` for all; the cluster's is kafka-cluster.")
    pattern_type: Literal["literal", "prefix"] = "literal"


class AclRule(_Model):
    """One ACL rule of a user, as Strimzi's KafkaUser writes it: a resource, operations, a host and
    allow or deny."""

    resource: AclResource
    operations: list[
        Literal["All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
                "DescribeConfigs", "AlterConfigs", "IdempotentWrite"]
    ] = Field(min_length=1, max_length=11)
    host: str = Field(default="*", max_length=253)
    type: Literal["allow", "deny"] = "allow"


class UserSpec(_Model):
    """A Kafka user the operator manages: its credentials (a SCRAM-SHA-512 password or a client
    certificate from the clients CA) go to the Secret `<cluster>-user-<name>`, and its ACLs are kept
    exactly as listed. Removing the user from the spec deletes its credentials, ACLs and Secret."""

    name: str = Field(pattern=_DNS_LABEL, max_length=40)
    authentication: Literal["scram-sha-512", "tls"]
    acls: list[AclRule] = Field(default_factory=list, max_length=256)


class PodTemplateMetadata(_Model):
    labels: dict[str, str] = Field(default_factory=dict, max_length=64)
    annotations: dict[str, str] = Field(default_factory=dict, max_length=64)


class PodTemplate(_Model):
    """Overrides merged into every node pod (labels, annotations, and a partial Pod spec)."""

    metadata: PodTemplateMetadata | None = None
    spec: dict[str, Any] | None = Field(
        default=None, json_schema_extra={"x-kubernetes-preserve-unknown-fields": True}
    )


class Lifecycle(_Model):
    """How the operator carries out lifecycle operations (rolls)."""

    termination_grace_period_seconds: int = Field(
        default=120, ge=1, le=3600,
        description="How long a node gets for its controlled shutdown (SIGTERM) before it is killed.",
    )
    stuck_roll_after_seconds: int = Field(
        default=1800, ge=10, le=604800,
        description="A roll blocked by a gate this long raises the stuck-roll runbook (it keeps waiting).",
    )
    reassignment_throttle_bytes_per_second: int | None = Field(
        default=52428800, ge=1,
        description="The replication throttle (leader.replication.throttled.rate and "
        "follower.replication.throttled.rate on the brokers involved, with the moving replicas as the "
        "topics' throttled replicas) while the operator reassigns partitions (a drain, a rebalance); "
        "removed once the move finishes. null: unthrottled.",
    )
    rebalance_on_scale_up: bool = Field(
        default=False,
        description="Move replicas onto brokers that joined and hold none (a throttled reassignment). "
        "Kafka never does this by itself; off by default.",
    )


def _default_listeners() -> list[Listener]:
    return [Listener(name="PLAINTEXT", port=9092)]


class KRaftClusterSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "self.nodePools.exists(p, 'controller' in p.roles && p.replicas > 0)",
                    "at least one node pool must have the controller role and replicas > 0",
                    field_path=".nodePools",
                ),
                _cel(
                    "!has(oldSelf.clusterId) || (has(self.clusterId) && self.clusterId == oldSelf.clusterId)",
                    "clusterId is immutable once set",
                    field_path=".clusterId",
                ),
                _cel(
                    "self.listeners.all(l, l.name != 'CONTROLLER' && l.port != self.controllerPort)",
                    "a client listener cannot be named CONTROLLER or use the controller port",
                    field_path=".listeners",
                ),
                _cel(
                    "self.listeners.all(l, self.listeners.exists_one(m, m.port == l.port))",
                    "listener ports must be distinct",
                    field_path=".listeners",
                ),
            ]
        }
    )

    cluster_id: str | None = Field(
        default=None,
        pattern=_KAFKA_UUID,
        max_length=22,
        description="The Kafka cluster id; assigned by the operator (status.clusterId) when unset.",
    )
    image: str = Field(default="kraftwerk:0.1.0", max_length=512, description="The engine's container image.")
    version: str = Field(default="0.1.0", max_length=32, description="The engine's version in that image.")
    paused: bool = Field(default=False, description="Observe only: take no action while true.")
    node_pools: list[NodePool] = Field(
        min_length=1,
        max_length=16,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    listeners: list[Listener] = Field(
        default_factory=_default_listeners,
        min_length=1,
        max_length=8,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["name"],
            "default": [{"name": "PLAINTEXT", "port": 9092, "protocol": "PLAINTEXT"}],
        },
    )
    controller_port: int = Field(default=9093, ge=1024, le=65535)
    config: dict[str, str] = Field(
        default_factory=dict,
        max_length=256,
        description="server.properties overrides for every node, checked against the engine's config rules.",
    )
    metadata_version: str | None = Field(
        default=None,
        pattern=_METADATA_VERSION,
        max_length=16,
        description="metadata.version to format new clusters with (e.g. 4.1-IV1); the newest every pool runs when unset.",
    )
    pod_template: PodTemplate | None = None
    lifecycle: Lifecycle = Field(default_factory=Lifecycle)
    tls: TlsSpec | None = Field(
        default=None, description="TLS between nodes and for SSL / SASL_SSL listeners; absent: plaintext."
    )
    users: list[UserSpec] = Field(
        default_factory=list, max_length=256,
        description="Kafka users the operator manages (needs spec.tls: an authorizer runs once TLS is on).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class ConditionType(StrEnum):
    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    PAUSED = "Paused"
    EVEN_CONTROLLERS = "EvenControllerCount"  # a warning: True while the spec asks for an even count
    IDLE_BROKERS = "BrokersWithoutReplicas"  # True while a running broker holds no replica (Kafka never rebalances)


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(_Model):
    """A Kubernetes condition (metav1.Condition's fields)."""

    type: ConditionType
    status: ConditionStatus
    reason: str = Field(max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(description="RFC 3339")
    observed_generation: int | None = None


class QuorumReplicaStatus(_Model):
    id: int
    directory_id: str
    endpoints: list[str] = Field(default_factory=list)
    log_end_offset: int
    lag: int
    caught_up: bool


class QuorumStatus(_Model):
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplicaStatus] = Field(default_factory=list)
    observers: list[QuorumReplicaStatus] = Field(default_factory=list)


class DirectoryStatus(_Model):
    volume_id: int
    path: str
    directory_id: str | None = None
    requested_bytes: int | None = Field(
        default=None, description="What the volume's claim asks for; above capacityBytes while it grows."
    )
    capacity_bytes: int | None = Field(default=None, description="What the volume holds.")
    offline: bool | None = Field(
        default=None,
        description="The broker reports this log directory offline (DescribeLogDirs: KAFKA_STORAGE_ERROR); "
        "unset where the broker was not asked or did not answer.",
    )
    total_bytes: int | None = Field(default=None, description="The file system's size, as the broker reports it.")
    usable_bytes: int | None = Field(default=None, description="Free bytes on it, as the broker reports it.")


class NodeStatus(_Model):
    id: int
    pool: str
    roles: list[Role]
    implementation: Implementation = Implementation.KRAFTWERK
    phase: str = Field(description="Pod phase (Pending, Running, Failed, ...) or Absent")
    version: str | None = None
    formatted: bool = False
    directories: list[DirectoryStatus] = Field(default_factory=list)
    registered: bool | None = None
    fenced: bool | None = None


class PartitionsStatus(_Model):
    total: int = 0
    under_replicated: int = 0
    under_min_isr: int = 0
    offline: int = 0


class MetadataVersionStatus(_Model):
    finalized: str | None = None
    target: str | None = None
    failed_bump: str | None = Field(
        default=None, description="Why the last UpdateFeatures for the target was refused; kept until the target "
        "is finalized (the failed-metadata-version-bump runbook is open meanwhile).")
    failed_at: str | None = None


class BlockerStatus(_Model):
    """One thing a gate waits for: a partition (replicas, ISR, min ISR), a lagging voter (lag), a
    node that is not back yet, or an approval (the annotation a dangerous step waits for)."""

    kind: Literal["partition", "voter", "node", "cluster", "approval", "log-dir"]
    message: str
    topic: str | None = None
    partition: int | None = None
    replicas: list[int] | None = None
    isr: list[int] | None = None
    min_isr: int | None = None
    node_id: int | None = None
    lag: int | None = None
    caught_up_ms_ago: int | None = None


class RollStatus(_Model):
    """A rolling restart's progress, written at every step so a restarted operator resumes it.

    `pending` are the nodes still to restart, in order; `current` the node restarted last, until
    the cluster says it has recovered (`phase` awaiting-recovery); `done` the nodes restarted."""

    trigger: str = Field(description="What started the roll: revision changes, or the manual annotation's value.")
    pending: list[int] = Field(default_factory=list)
    done: list[int] = Field(default_factory=list)
    current: int | None = None
    phase: Literal["gating", "restarting", "awaiting-recovery"] = "gating"
    restarted_at: str | None = None
    blocked_since: str | None = None


class PartitionMoveStatus(_Model):
    """One partition's target replicas while a broker is drained."""

    topic: str
    partition: int
    replicas: list[int]


class TopicThrottleStatus(_Model):
    """One topic's throttled replicas during a reassignment, in Kafka's `partition:broker` lists:
    the replicas moved from (leader side) and the replicas being added (follower side)."""

    topic: str
    leader_replicas: str = ""
    follower_replicas: str = ""


class ReassignmentThrottleStatus(_Model):
    """The replication throttle the operator set for its reassignment, removed once it finished."""

    rate_bytes_per_second: int
    brokers: list[int] = Field(default_factory=list)
    topics: list[TopicThrottleStatus] = Field(default_factory=list)
    cleared_at: str | None = Field(default=None, description="When its removal was sent.")


class RebalanceStatus(_Model):
    """Replicas moved onto brokers that joined holding none (`spec.lifecycle.rebalanceOnScaleUp`):
    the planned targets, recorded before they are sent, and their throttle."""

    brokers: list[int] = Field(default_factory=list, description="The brokers that held no replica.")
    moves: list[PartitionMoveStatus] = Field(default_factory=list)
    throttle: ReassignmentThrottleStatus | None = None


class ScaleDownStatus(_Model):
    """Nodes leaving the cluster, one at a time: `current` is the node being removed (voter removal,
    drain, stop, unregister), `moves` the reassignment planned for it, recorded before it is sent."""

    leaving: list[int] = Field(default_factory=list)
    current: int | None = None
    moves: list[PartitionMoveStatus] = Field(default_factory=list)
    removed: list[int] = Field(default_factory=list)
    sent_at: str | None = Field(default=None, description="When the current step's request was last sent.")
    throttle: ReassignmentThrottleStatus | None = None


class VolumeReplacementStatus(_Model):
    """A broker's lost log directory (one volume of a JBOD node) being replaced: which one, the
    directory id it had, and, once formatted, the one it has now."""

    node_id: int
    volume_id: int
    path: str
    lost_directory_id: str
    new_directory_id: str | None = None
    replaced_at: str | None = Field(default=None, description="When the volume was replaced (the broker stopped).")


class LogDirMoveStatus(_Model):
    """One replica's recorded destination while a log directory is emptied."""

    topic: str
    partition: int
    log_dir: str


class LogDirRemovalStatus(_Model):
    """A JBOD log directory the spec dropped, being emptied with AlterReplicaLogDirs before its
    broker restarts without it: which one, and where each of its replicas goes."""

    node_id: int
    path: str
    moves: list[LogDirMoveStatus] = Field(default_factory=list)


class OperationStatus(_Model):
    """The operation in progress: what it is, which step, and what it waits for. Resumed from here
    after an operator restart."""

    name: str
    step: str = ""
    waiting_for: str = ""
    started_at: str | None = None
    blocked_by: list[BlockerStatus] = Field(default_factory=list)
    roll: RollStatus | None = None
    scale_down: ScaleDownStatus | None = None
    volume: VolumeReplacementStatus | None = None
    rebalance: RebalanceStatus | None = None
    log_dir: LogDirRemovalStatus | None = None


class RunbookStepStatus(_Model):
    """One step of a runbook: automated, or needing the approval annotation; done or pending."""

    id: str
    description: str
    mode: Literal["automated", "approval", "manual"]
    approval: str | None = Field(default=None, description="The annotation that approves the step.")
    dangerous: bool = False
    state: Literal["done", "pending", "approved"] = "pending"


class RunbookStatus(_Model):
    """A situation the operator detected, with the evidence, its ordered steps, and the commands a
    human would run instead. Closed (removed) once the situation clears."""

    name: str
    title: str
    situation: str
    evidence: list[str] = Field(default_factory=list)
    detected_at: str
    steps: list[RunbookStepStatus] = Field(default_factory=list)
    commands: list[str] = Field(default_factory=list)
    docs: str | None = None


class KRaftClusterStatus(_Model):
    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                _cel(
                    "!has(oldSelf.clusterId) || (has(self.clusterId) && self.clusterId == oldSelf.clusterId)",
                    "status.clusterId is immutable once assigned",
                    field_path=".clusterId",
                ),
            ]
        }
    )

    observed_generation: int | None = None
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    cluster_id: str | None = Field(default=None, pattern=_KAFKA_UUID, max_length=22)
    initial_controllers: str | None = Field(
        default=None, description="The --initial-controllers value the first controllers were formatted with."
    )
    controllers: str | None = Field(default=None, description="ready/desired controllers, e.g. 3/3")
    brokers: str | None = Field(default=None, description="ready/desired brokers, e.g. 3/3")
    quorum: QuorumStatus | None = None
    nodes: list[NodeStatus] = Field(default_factory=list)
    partitions: PartitionsStatus | None = None
    metadata_version: MetadataVersionStatus | None = None
    operation: OperationStatus | None = None
    last_manual_roll: str | None = Field(
        default=None, description="The value of kraftwerk.io/manual-rolling-update whose roll finished."
    )
    runbooks: list[RunbookStatus] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    def condition(self, kind: ConditionType) -> Condition | None:
        return next((c for c in self.conditions if c.type == kind), None)

    def node(self, node_id: int) -> NodeStatus | None:
        return next((n for n in self.nodes if n.id == node_id), None)


class ObjectMeta(BaseModel):
    """The metadata fields the operator reads; everything else is kept as it came."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)

    name: str = Field(pattern=_DNS_LABEL, max_length=40)
    namespace: str | None = None
    generation: int | None = None
    uid: str | None = None
    creation_timestamp: str | None = None
    annotations: dict[str, str] = Field(default_factory=dict)


class KRaftCluster(_Model):
    """The whole resource as `kubectl get kc NAME -o yaml` shows it."""

    api_version: Literal["kraftwerk.io/v1alpha1"] = API_VERSION
    kind: Literal["KRaftCluster"] = KIND
    metadata: ObjectMeta
    spec: KRaftClusterSpec
    status: KRaftClusterStatus | None = None
