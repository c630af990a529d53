"""The Kubernetes runtime: the runtime port (`kraft_operator.runtime.port`) on Pods, PVCs and Jobs.

One Pod per node, owned by the KRaftCluster, not a StatefulSet: the operator alone decides which
node restarts or leaves, and when (Strimzi moved to its own pod sets for the same reason). Around
the pods:

- a PVC per node and volume, never owned by the cluster, so deleting the resource keeps them unless
  the volume's `deleteClaim` says otherwise (the finalizer in `kraft_operator.handlers` does that);
- a headless Service that gives every node a stable DNS name (its advertised host), publishing
  addresses before readiness so controllers find each other while they elect, and a bootstrap
  Service for clients in front of the brokers;
- a ConfigMap per node with its rendered `server.properties`;
- a PodDisruptionBudget per pool: a controller pool keeps a majority, a broker pool loses at most one;
- for a broker pool with `rack`, an init container (`kraft_operator.runtime.rack_init`) that adds
  `broker.rack` to the config: once the pod is scheduled, the operator reads the topology label of
  its node and writes it on the pod as an annotation, which reaches the init container through a
  downward-API volume (the node pods get no API credentials);
- a node restarts (one step of a roll) by deleting its pod with the spec's grace period (the kubelet
  sends SIGTERM: the engine's controlled shutdown), waiting until the pod is gone, and creating it
  again from the stored config; the pod carries the revision it was started with
  (`kraftwerk.io/revision`), which is what a roll compares, and a node leaving the cluster is stopped
  the same way without the new pod (its ConfigMap and PVCs stay, except the claims of volumes whose
  spec says `deleteClaim: true`, which the plan names in `StopNode.delete_volumes`);
- a failed broker volume is a claim whose PersistentVolume is gone (phase `Lost`): it is observed as
  an unformatted volume, which raises the broker-disk-loss runbook; once approved, `ReplaceVolume`
  deletes the broker's pod (controlled shutdown), its format Jobs (their reports name the lost
  directory id) and the claim, and creates a new, empty claim of the same name, which the plan then
  formats and the broker starts on;
- a format Job per node (and per set of directories to format) running `kraft storage format`
  through `kraft_operator.runtime.format_job`, which reports each directory's id in the container's
  termination message. Once the node starts, those ids are also written on its PVCs, so the facts
  survive the Job's pod. A volume added to a formatted engine broker is formatted by the broker
  itself at its start: its id is read from the broker's `/kraftwerk/status` and written on the
  claim the same way (Kafka's DescribeLogDirs carries no directory id);
- a pool with `implementation: apache-kafka` runs Apache Kafka's own node from the jars the image
  carries (`kafka.Kafka` with the same rendered server.properties; its format Job runs Kafka's
  StorageTool). Kafka has no /readyz. A broker's pod is Ready once its first listener accepts
  connections, which Kafka's broker opens only after it has caught up with the metadata log and the
  controller has acknowledged it (`BrokerServer` enables its acceptors after the initial catch-up).
  A controller listens before its quorum has a leader, so a port says nothing: its pod (a combined
  node's too) runs `kraft_operator.runtime.controller_probe`, which asks raft (DescribeQuorum of the
  leader) whether the node leads or is caught up.

Every object carries the recommended `app.kubernetes.io/*` labels plus `kraftwerk.io/cluster`,
`kraftwerk.io/pool` and `kraftwerk.io/node-id`. The client is the official `kubernetes` package; its
calls block, so they run in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import os
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from kraft_engine.storage.java_properties import format_properties, parse_properties
from kraft_operator.model import (
    API_VERSION,
    KIND,
    MANUAL_ROLL_ANNOTATION,
    Implementation,
    KRaftCluster,
    NodePool,
    Role,
)
from kraft_operator.plan import (
    Action,
    FormatJobFacts,
    FormatStorage,
    JobPhase,
    NodeFacts,
    NodeRef,
    Observed,
    PodPhase,
    ReplaceVolume,
    ResizeVolume,
    RestartNode,
    StartNode,
    StopNode,
    VolumeFacts,
    WriteConfig,
)
from kraft_operator.plan.security import node_secret
from kraft_operator.runtime.kafka_java import kafka_server_command
from kraft_operator.runtime.kubernetes_secrets import KubernetesSecrets
from kraft_operator.runtime.network_policy import network_policy, wants_network_policy
from kraft_operator.runtime.port import RuntimeActionError
from kraft_operator.runtime.rack_init import RACK_ANNOTATION

__all__ = [
    "CONFIG_PATH",
    "DATA_ROOT",
    "LABEL_CLUSTER",
    "LABEL_NODE_ID",
    "LABEL_POOL",
    "METRICS_PORT",
    "KubernetesLayout",
    "KubernetesRuntime",
    "api_client",
    "claim_name",
    "headless_service_name",
    "pod_name",
    "read_log_dir_ids",
]

LABEL_CLUSTER = "kraftwerk.io/cluster"
LABEL_POOL = "kraftwerk.io/pool"
LABEL_NODE_ID = "kraftwerk.io/node-id"
LABEL_VOLUME_ID = "kraftwerk.io/volume-id"
LABEL_CONTROLLER = "kraftwerk.io/controller"
LABEL_BROKER = "kraftwerk.io/broker"
ANNOTATION_CLUSTER_ID = "kraftwerk.io/cluster-id"
ANNOTATION_DIRECTORY_ID = "kraftwerk.io/directory-id"
ANNOTATION_DIRECTORIES = "kraftwerk.io/directories"
ANNOTATION_REVISION = "kraftwerk.io/revision"
LABEL_IMPLEMENTATION = "kraftwerk.io/implementation"
# Apache Kafka in the image (Dockerfile: KAFKA_VERSION, the jars under /opt/kafka/libs)
KAFKA_LIBS = "/opt/kafka/libs"
KAFKA_CLASSPATH = f"{KAFKA_LIBS}/*"
IMAGE_KAFKA_VERSION = "4.1.0"
# how long past its grace period a deleted pod may take to go (the kubelet's SIGKILL, volume detach)
_POD_GONE_SLACK_S = 120.0
# how long to wait for an engine broker's /kraftwerk/status (its log directories' ids)
_STATUS_TIMEOUT_S = 2.0

CONFIG_DIR = "/etc/kraftwerk"
CONFIG_PATH = f"{CONFIG_DIR}/server.properties"
# a rack-aware broker starts from the config its init container wrote here (an emptyDir)
RACK_CONFIG_DIR = "/var/run/kraftwerk"
RACK_CONFIG_PATH = f"{RACK_CONFIG_DIR}/server.properties"
POD_INFO_DIR = "/etc/kraftwerk-pod"
DATA_ROOT = "/var/lib/kraftwerk"
METRICS_PORT = 9404
TLS_ROOT = "/etc/kraftwerk/tls"  # the node's TLS Secret, mounted read-only
# the image's non-root user (Dockerfile); fsGroup makes volumes writable for it where the driver allows
POD_UID = 10001
_MANAGER = "kraftwerk-operator"
_CONTAINER = "kraft"

def pod_name(node: NodeRef) -> str:
    return f"{node.cluster}-{node.pool}-{node.node_id}"


def headless_service_name(cluster: str) -> str:
    return f"{cluster}-nodes"


def bootstrap_service_name(cluster: str) -> str:
    return f"{cluster}-bootstrap"


def claim_name(node: NodeRef, volume_id: int) -> str:
    return f"data-{volume_id}-{pod_name(node)}"


def _config_map_name(node: NodeRef) -> str:
    return f"{pod_name(node)}-config"


def _format_job_name(node: NodeRef, directories: tuple[str, ...]) -> str:
    # one Job per node and set of directories: adding a JBOD volume later formats in a new Job
    digest = hashlib.sha256("\n".join(directories).encode()).hexdigest()[:8]
    return f"{pod_name(node)}-format-{digest}"


@dataclass(frozen=True, slots=True)
class KubernetesLayout:
    """Nodes reach each other by their pods' DNS names under the headless Service; ports are the
    spec's (every pod has its own address); each volume is mounted at /var/lib/kraftwerk/data-<id>."""

    cluster_domain: str = "cluster.local"

    def advertised_host(self, node: NodeRef) -> str:
        return f"{pod_name(node)}.{headless_service_name(node.cluster)}.{node.namespace}.svc.{self.cluster_domain}"

    def bind_host(self, node: NodeRef) -> str:
        return "0.0.0.0"

    def port(self, node: NodeRef, *, listener: str, spec_port: int) -> int:
        return spec_port

    def volume_path(self, node: NodeRef, *, volume_id: int) -> str:
        return f"{DATA_ROOT}/data-{volume_id}"

    def metrics_port(self, node: NodeRef) -> int | None:
        return METRICS_PORT

    def tls_dir(self, node: NodeRef) -> str:
        return TLS_ROOT

    def certificate_hosts(self, node: NodeRef) -> tuple[str, ...]:
        """The pod's names under the headless Service and the bootstrap Service's names, short and
        qualified, as a client inside or outside the namespace may dial them."""
        pod, headless = pod_name(node), headless_service_name(node.cluster)
        bootstrap = bootstrap_service_name(node.cluster)
        namespace = node.namespace
        return (
            f"{pod}.{headless}.{namespace}.svc.{self.cluster_domain}", f"{pod}.{headless}.{namespace}.svc",
            f"{pod}.{headless}.{namespace}", f"{pod}.{headless}",
            f"{bootstrap}.{namespace}.svc.{self.cluster_domain}", f"{bootstrap}.{namespace}.svc",
            f"{bootstrap}.{namespace}", bootstrap,
        )


def api_client(*, kubeconfig: str | None = None, context: str | None = None) -> k8s.ApiClient:
    """In a pod, the pod's ServiceAccount; otherwise the kubeconfig (KUBECONFIG, ~/.kube/config)."""
    configuration = k8s.Configuration()
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, context=context, client_configuration=configuration)
    return k8s.ApiClient(configuration)


def _labels(cluster: KRaftCluster, *, component: str, pool: NodePool | None = None,
            node: NodeRef | None = None) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/name": "kraft",
        "app.kubernetes.io/instance": cluster.metadata.name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/part-of": "kraftwerk",
        "app.kubernetes.io/managed-by": _MANAGER,
        "app.kubernetes.io/version": cluster.spec.version,
        LABEL_CLUSTER: cluster.metadata.name,
    }
    if pool is not None:
        labels[LABEL_POOL] = pool.name
        labels[LABEL_IMPLEMENTATION] = pool.implementation.value
        if pool.implementation is Implementation.APACHE_KAFKA:
            labels["app.kubernetes.io/version"] = IMAGE_KAFKA_VERSION
        labels[LABEL_CONTROLLER] = str(Role.CONTROLLER in pool.roles).lower()
        labels[LABEL_BROKER] = str(Role.BROKER in pool.roles).lower()
    if node is not None:
        labels[LABEL_NODE_ID] = str(node.node_id)
    return labels


def _owner(cluster: KRaftCluster) -> list[dict[str, Any]]:
    uid = cluster.metadata.uid
    if uid is None:
        raise RuntimeActionError(f"KRaftCluster {cluster.metadata.name} has no uid; cannot own its objects")
    return [{"apiVersion": API_VERSION, "kind": KIND, "name": cluster.metadata.name, "uid": uid,
             "controller": True, "blockOwnerDeletion": True}]


def _pool_component(pool: NodePool) -> str:
    return "-".join(r.value for r in (Role.CONTROLLER, Role.BROKER) if r in pool.roles)


def _pool(cluster: KRaftCluster, name: str) -> NodePool:
    for pool in cluster.spec.node_pools:
        if pool.name == name:
            return pool
    raise RuntimeActionError(f"node pool {name} is not in the spec of {cluster.metadata.name}")


def _merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """A pod template override merged into the generated pod spec: maps merge key by key, lists of
    named items (containers, volumes) merge by name, anything else is replaced."""
    merged = dict(base)
    for key, value in override.items():
        current = merged.get(key)
        if isinstance(current, dict) and isinstance(value, Mapping):
            merged[key] = _merge(current, value)
        elif (isinstance(current, list) and isinstance(value, list)
              and all(isinstance(i, Mapping) and "name" in i for i in [*current, *value])):
            by_name = {item["name"]: dict(item) for item in current}
            for item in value:
                by_name[item["name"]] = _merge(by_name.get(item["name"], {}), item)
            merged[key] = list(by_name.values())
        else:
            merged[key] = value
    return merged


class KubernetesRuntime:
    """The runtime port on a Kubernetes API server. `api` is a `kubernetes.client.ApiClient`."""

    name = "kubernetes"

    def __init__(self, api: k8s.ApiClient, *, cluster_domain: str = "cluster.local") -> None:
        self._api = api
        self._core = k8s.CoreV1Api(api)
        self._batch = k8s.BatchV1Api(api)
        self._policy = k8s.PolicyV1Api(api)
        self._networking = k8s.NetworkingV1Api(api)
        self._layout = KubernetesLayout(cluster_domain=cluster_domain)
        self.secrets = KubernetesSecrets(self._core)

    def layout(self, cluster: KRaftCluster) -> KubernetesLayout:
        return self._layout

    async def close(self) -> None:
        await asyncio.to_thread(self._api.close)

    # --- observe -------------------------------------------------------------------------------

    async def observe(self, cluster: KRaftCluster) -> Observed:
        namespace = _namespace(cluster)
        selector = f"{LABEL_CLUSTER}={cluster.metadata.name}"
        pods, claims, maps, jobs = await asyncio.gather(
            self._call(self._core.list_namespaced_pod, namespace, label_selector=selector),
            self._call(self._core.list_namespaced_persistent_volume_claim, namespace, label_selector=selector),
            self._call(self._core.list_namespaced_config_map, namespace, label_selector=selector),
            self._call(self._batch.list_namespaced_job, namespace, label_selector=selector),
        )
        job_facts, formatted_ids = _job_facts(jobs.items, pods.items)
        await self._label_racks(cluster, pods.items)
        nodes: dict[int, dict[str, Any]] = {}

        def entry(labels: Mapping[str, str]) -> dict[str, Any] | None:
            if LABEL_NODE_ID not in labels or LABEL_POOL not in labels:
                return None
            node_id = int(labels[LABEL_NODE_ID])
            return nodes.setdefault(node_id, {"node_id": node_id, "pool": labels[LABEL_POOL], "volumes": []})

        for pod in pods.items:
            labels = pod.metadata.labels or {}
            if labels.get("app.kubernetes.io/component") == "format":
                continue
            facts = entry(labels)
            if facts is not None:
                facts.update(_pod_facts(pod))
        for config_map in maps.items:
            facts = entry(config_map.metadata.labels or {})
            if facts is not None and config_map.data and "server.properties" in config_map.data:
                facts["config"] = parse_properties(config_map.data["server.properties"])
        unreported: dict[int, list[tuple[Any, VolumeFacts]]] = {}  # bound claims no format Job reported
        for claim in claims.items:
            labels = claim.metadata.labels or {}
            facts = entry(labels)
            if facts is None or LABEL_VOLUME_ID not in labels or claim.metadata.deletion_timestamp is not None:
                continue
            volume_id = int(labels[LABEL_VOLUME_ID])
            node = NodeRef(namespace, cluster.metadata.name, labels[LABEL_POOL], facts["node_id"])
            path = self._layout.volume_path(node, volume_id=volume_id)
            volume = _volume_facts(claim, volume_id=volume_id, path=path, node_id=facts["node_id"],
                                   job=job_facts.get(facts["node_id"]), job_cluster_id=formatted_ids.get(facts["node_id"]))
            facts["volumes"].append(volume)
            if volume.directory_id is None and claim.status is not None and claim.status.phase == "Bound":
                unreported.setdefault(facts["node_id"], []).append((claim, volume))
        await self._read_broker_directory_ids(cluster, pods.items, nodes, unreported)
        observed_nodes = {
            node_id: NodeFacts(**{**facts, "volumes": tuple(sorted(facts["volumes"], key=lambda v: v.volume_id))})
            for node_id, facts in nodes.items()
        }
        return Observed(nodes=observed_nodes, format_jobs=job_facts)

    async def _read_broker_directory_ids(
        self, cluster: KRaftCluster, pods: list[Any], nodes: dict[int, dict[str, Any]],
        unreported: Mapping[int, list[tuple[Any, VolumeFacts]]],
    ) -> None:
        """The directory ids of volumes an engine broker formatted itself at its start (a JBOD
        volume added to a formatted broker): no format Job reported them and Kafka's
        DescribeLogDirs carries no id, so the broker's own `/kraftwerk/status` is asked (its log
        directories with the ids in their meta.properties), once it runs and is ready. They are
        written on the claims, as a format Job's report is, and count from this observation on.
        Apache Kafka's brokers have no such endpoint: their added volumes stay without an id."""
        engine_brokers = {p.name for p in cluster.spec.node_pools
                          if Role.BROKER in p.roles and p.implementation is Implementation.KRAFTWERK}
        for pod in pods:
            labels = pod.metadata.labels or {}
            if (labels.get(LABEL_POOL) not in engine_brokers or LABEL_NODE_ID not in labels
                    or labels.get("app.kubernetes.io/component") == "format"):
                continue
            node_id = int(labels[LABEL_NODE_ID])
            waiting = unreported.get(node_id)
            facts = nodes.get(node_id)
            if not waiting or facts is None or not facts.get("ready") or not pod.status.pod_ip:
                continue
            reported = await read_log_dir_ids(f"http://{pod.status.pod_ip}:{METRICS_PORT}/kraftwerk/status",
                                              timeout_s=_STATUS_TIMEOUT_S)
            if reported is None:
                continue
            cluster_id, ids = reported
            for claim, volume in waiting:
                directory_id = ids.get(volume.path.rstrip("/"))
                if directory_id is None:
                    continue
                await self._call(self._core.patch_namespaced_persistent_volume_claim, claim.metadata.name,
                                 claim.metadata.namespace, {"metadata": {"annotations": {
                                     ANNOTATION_DIRECTORY_ID: directory_id, ANNOTATION_CLUSTER_ID: cluster_id}}})
                found = replace(volume, directory_id=directory_id, cluster_id=cluster_id, node_id=node_id)
                facts["volumes"] = [found if v is volume else v for v in facts["volumes"]]

    async def _label_racks(self, cluster: KRaftCluster, pods: list[Any]) -> None:
        """Give every scheduled broker pod of a rack-aware pool its node's topology label, as the
        annotation its init container waits for (once; empty when the node has no such label)."""
        keys = {pool.name: pool.rack.topology_key for pool in cluster.spec.node_pools
                if pool.rack is not None and Role.BROKER in pool.roles}
        for pod in pods:
            labels = pod.metadata.labels or {}
            key = keys.get(labels.get(LABEL_POOL, ""))
            if (key is None or labels.get("app.kubernetes.io/component") == "format" or not pod.spec.node_name
                    or RACK_ANNOTATION in (pod.metadata.annotations or {}) or pod.metadata.deletion_timestamp):
                continue
            node = await self._call(self._core.read_node, pod.spec.node_name)
            rack = (node.metadata.labels or {}).get(key, "")
            await self._call(self._core.patch_namespaced_pod, pod.metadata.name, pod.metadata.namespace,
                             {"metadata": {"annotations": {RACK_ANNOTATION: rack}}})

    # --- apply ---------------------------------------------------------------------------------

    async def apply(self, cluster: KRaftCluster, action: Action) -> None:
        await self._ensure_cluster_objects(cluster)
        if isinstance(action, WriteConfig):
            await self._write_config(cluster, action)
        elif isinstance(action, FormatStorage):
            await self._format(cluster, action)
        elif isinstance(action, StartNode):
            await self._start(cluster, action)
        elif isinstance(action, RestartNode):
            await self._delete_pod(action.node, grace_period_ms=action.grace_period_ms)
            await self._start(cluster, action)
        elif isinstance(action, StopNode):
            await self._delete_pod(action.node, grace_period_ms=action.grace_period_ms)
            for volume_id in action.delete_volumes:
                await self._delete_claim(claim_name(action.node, volume_id), action.node.namespace)
        elif isinstance(action, ReplaceVolume):
            await self._replace_volume(cluster, action)
        elif isinstance(action, ResizeVolume):
            await self._resize(action)
        else:  # pragma: no cover - the Action union is closed
            raise RuntimeActionError(f"unknown action {action!r}")

    async def _ensure_cluster_objects(self, cluster: KRaftCluster) -> None:
        """The headless and bootstrap Services and each pool's PDB, created once, kept in step."""
        namespace = _namespace(cluster)
        spec = cluster.spec
        owner = _owner(cluster)
        node_ports = [{"name": "controller", "port": spec.controller_port, "targetPort": spec.controller_port}]
        node_ports += [{"name": ln.name.lower().replace("_", "-"), "port": ln.port, "targetPort": ln.port}
                       for ln in spec.listeners]
        if spec.tls is not None:
            node_ports.append({"name": "replication", "port": spec.tls.replication_port,
                               "targetPort": spec.tls.replication_port})
        selector = {LABEL_CLUSTER: cluster.metadata.name, "app.kubernetes.io/part-of": "kraftwerk",
                    "app.kubernetes.io/managed-by": _MANAGER}
        headless = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": headless_service_name(cluster.metadata.name), "namespace": namespace,
                         "labels": _labels(cluster, component="nodes"), "ownerReferences": owner},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {**selector, "app.kubernetes.io/name": "kraft"}, "ports": node_ports},
        }
        bootstrap = {
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": bootstrap_service_name(cluster.metadata.name), "namespace": namespace,
                         "labels": _labels(cluster, component="bootstrap"), "ownerReferences": owner},
            "spec": {"type": "ClusterIP", "selector": {**selector, LABEL_BROKER: "true"},
                     "ports": [{"name": ln.name.lower().replace("_", "-"), "port": ln.port, "targetPort": ln.port}
                               for ln in spec.listeners]},
        }
        await self._apply_object(headless)
        await self._apply_object(bootstrap)
        if wants_network_policy(cluster):
            await self._apply_object(network_policy(
                cluster, namespace=namespace, cluster_label=LABEL_CLUSTER, metrics_port=METRICS_PORT,
                labels=_labels(cluster, component="network-policy"), owner=owner))
        for pool in spec.node_pools:
            budget: dict[str, Any] = {"selector": {"matchLabels": {LABEL_CLUSTER: cluster.metadata.name,
                                                                   LABEL_POOL: pool.name}}}
            if Role.CONTROLLER in pool.roles:
                budget["minAvailable"] = pool.replicas // 2 + 1 if pool.replicas else 0
            else:
                budget["maxUnavailable"] = 1
            await self._apply_object({
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": f"{cluster.metadata.name}-{pool.name}", "namespace": namespace,
                             "labels": _labels(cluster, component=_pool_component(pool), pool=pool),
                             "ownerReferences": owner},
                "spec": budget,
            })

    async def _write_config(self, cluster: KRaftCluster, action: WriteConfig) -> None:
        pool = _pool(cluster, action.node.pool)
        text = format_properties(dict(action.properties), comments=(f"node {action.node.node_id} of "
                                                                    f"{cluster.metadata.name}, written by kraftwerk",))
        await self._apply_object({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": _config_map_name(action.node), "namespace": action.node.namespace,
                         "labels": _labels(cluster, component=_pool_component(pool), pool=pool, node=action.node),
                         "ownerReferences": _owner(cluster)},
            "data": {"server.properties": text},
        })

    async def _ensure_claims(self, cluster: KRaftCluster, node: NodeRef) -> None:
        pool = _pool(cluster, node.pool)
        for volume in pool.storage.volumes:
            claim: dict[str, Any] = {
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                # no owner: a claim outlives the KRaftCluster unless its volume says deleteClaim
                "metadata": {"name": claim_name(node, volume.id), "namespace": node.namespace,
                             "labels": {**_labels(cluster, component=_pool_component(pool), pool=pool, node=node),
                                        LABEL_VOLUME_ID: str(volume.id)}},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": volume.size}}},
            }
            if volume.class_ is not None:
                claim["spec"]["storageClassName"] = volume.class_
            await self._create_if_absent(claim)

    async def _resize(self, action: ResizeVolume) -> None:
        """Raise the claim's request; the API server refuses it when the StorageClass cannot expand."""
        name = claim_name(action.node, action.volume_id)
        try:
            await self._call(self._core.patch_namespaced_persistent_volume_claim, name, action.node.namespace,
                             {"spec": {"resources": {"requests": {"storage": action.size}}}})
        except ApiException as e:
            raise RuntimeActionError(_api_error({"kind": "PersistentVolumeClaim", "metadata": {"name": name}}, e)) from None

    async def _replace_volume(self, cluster: KRaftCluster, action: ReplaceVolume) -> None:
        """A failed broker volume: the broker stopped (controlled shutdown), then a new, empty claim in
        place of the old one. The node's format Jobs go too: their reports still name the lost
        directory's id, which would make the new, empty volume look formatted."""
        node = action.node
        await self._delete_pod(node, grace_period_ms=action.grace_period_ms)
        jobs = await self._call(self._batch.list_namespaced_job, node.namespace,
                                label_selector=f"{LABEL_CLUSTER}={node.cluster},{LABEL_NODE_ID}={node.node_id}")
        for job in jobs.items:
            try:
                await self._call(self._batch.delete_namespaced_job, job.metadata.name, node.namespace,
                                 propagation_policy="Background")
            except ApiException as e:
                if e.status != 404:
                    raise RuntimeActionError(_api_error({"kind": "Job", "metadata": {"name": job.metadata.name}}, e)) from None
        name = claim_name(node, action.volume_id)
        await self._delete_claim(name, node.namespace)
        deadline = time.monotonic() + _POD_GONE_SLACK_S
        while await self._read_optional(self._core.read_namespaced_persistent_volume_claim, name, node.namespace):
            if time.monotonic() > deadline:
                raise RuntimeActionError(f"claim {name} still exists {_POD_GONE_SLACK_S:.0f} s after its deletion")
            await asyncio.sleep(0.5)
        await self._ensure_claims(cluster, node)

    async def _delete_claim(self, name: str, namespace: str) -> None:
        try:
            await self._call(self._core.delete_namespaced_persistent_volume_claim, name, namespace)
        except ApiException as e:
            if e.status != 404:
                raise RuntimeActionError(_api_error({"kind": "PersistentVolumeClaim", "metadata": {"name": name}}, e)) from None

    async def _format(self, cluster: KRaftCluster, action: FormatStorage) -> None:
        node = action.node
        pool = _pool(cluster, node.pool)
        await self._ensure_claims(cluster, node)
        name = _format_job_name(node, action.directories)
        labels = {**_labels(cluster, component="format", pool=pool, node=node)}
        kafka = ["--kafka-classpath", KAFKA_CLASSPATH] if pool.implementation is Implementation.APACHE_KAFKA else []
        command = ["python3", "-m", "kraft_operator.runtime.format_job", *kafka, "--",
                   *action.format_arguments(config_path=CONFIG_PATH)]
        pod_spec = self._pod_spec(cluster, node=node, pool=pool, command=command, restart_policy="Never",
                                  with_probes=False)
        job = {
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": node.namespace, "labels": labels,
                         "annotations": {ANNOTATION_DIRECTORIES: json.dumps(list(action.directories))},
                         "ownerReferences": _owner(cluster)},
            "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": labels}, "spec": pod_spec}},
        }
        await self._create_if_absent(job)

    async def _delete_pod(self, node: NodeRef, *, grace_period_ms: int) -> None:
        """The node's controlled shutdown: delete its pod with the grace period (the kubelet sends
        SIGTERM, then SIGKILL once the period is over) and wait until the pod is gone, so the node's
        volumes are free and nothing of it still answers when this returns."""
        name = pod_name(node)
        grace_s = math.ceil(grace_period_ms / 1000)
        try:
            await self._call(self._core.delete_namespaced_pod, name, node.namespace,
                             grace_period_seconds=grace_s)
        except ApiException as e:
            if e.status != 404:
                raise RuntimeActionError(_api_error({"kind": "Pod", "metadata": {"name": name}}, e)) from None
        deadline = time.monotonic() + grace_s + _POD_GONE_SLACK_S
        while await self._read_optional(self._core.read_namespaced_pod, name, node.namespace) is not None:
            if time.monotonic() > deadline:
                raise RuntimeActionError(f"pod {name} still exists {grace_s + _POD_GONE_SLACK_S:.0f} s after its "
                                         f"deletion (grace period {grace_s} s)")
            await asyncio.sleep(0.5)

    async def _start(self, cluster: KRaftCluster, action: StartNode | RestartNode) -> None:
        node = action.node
        pool = _pool(cluster, node.pool)
        # a volume added to a formatted broker gets its claim here: the broker formats it at its start
        await self._ensure_claims(cluster, node)
        await self._record_directory_ids(cluster, node)
        name = pod_name(node)
        existing = await self._read_optional(self._core.read_namespaced_pod, name, node.namespace)
        if existing is not None:
            if existing.metadata.deletion_timestamp is not None:
                raise RuntimeActionError(f"pod {name} is still terminating")
            if existing.status.phase in ("Failed", "Succeeded"):
                # a pod that ended (evicted, or its process exited with restartPolicy Never) is replaced
                await self._call(self._core.delete_namespaced_pod, name, node.namespace)
                raise RuntimeActionError(f"pod {name} had ended ({existing.status.phase}); deleted, recreating next")
            return
        labels = _labels(cluster, component=_pool_component(pool), pool=pool, node=node)
        annotations: dict[str, str] = {ANNOTATION_REVISION: action.revision} if action.revision else {}
        template = cluster.spec.pod_template
        if template is not None and template.metadata is not None:
            labels = {**template.metadata.labels, **labels}
            annotations = {**template.metadata.annotations, **annotations}
        rack_aware = pool.rack is not None and Role.BROKER in pool.roles
        config = RACK_CONFIG_PATH if rack_aware else CONFIG_PATH
        if pool.implementation is Implementation.APACHE_KAFKA:
            command = [*kafka_server_command(KAFKA_CLASSPATH, log_level="info"), config]
        else:
            command = ["kraft", "server", "start", "--config", config]
        spec = self._pod_spec(cluster, node=node, pool=pool, command=command, restart_policy="Always",
                              with_probes=True)
        if rack_aware:
            _add_rack_init(spec)
        spec["hostname"] = name
        spec["subdomain"] = headless_service_name(node.cluster)
        if template is not None and template.spec:
            spec = _merge(spec, template.spec)
        await self._create_if_absent({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": node.namespace, "labels": labels, "annotations": annotations,
                         "ownerReferences": _owner(cluster)},
            "spec": spec,
        })

    def _pod_spec(self, cluster: KRaftCluster, *, node: NodeRef, pool: NodePool, command: list[str],
                  restart_policy: str, with_probes: bool) -> dict[str, Any]:
        mounts = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
        volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": _config_map_name(node)}}]
        for volume in pool.storage.volumes:
            mounts.append({"name": f"data-{volume.id}",
                           "mountPath": self._layout.volume_path(node, volume_id=volume.id)})
            volumes.append({"name": f"data-{volume.id}",
                            "persistentVolumeClaim": {"claimName": claim_name(node, volume.id)}})
        if cluster.spec.tls is not None:
            # The node's TLS Secret (keystore, truststores), readable by the pod's group only.
            mounts.append({"name": "tls", "mountPath": TLS_ROOT, "readOnly": True})
            volumes.append({"name": "tls", "secret": {"secretName": node_secret(node.cluster, node.node_id),
                                                      "defaultMode": 0o440}})
        container: dict[str, Any] = {
            "name": _CONTAINER,
            "image": cluster.spec.image,
            "imagePullPolicy": "IfNotPresent",
            "command": command,
            "volumeMounts": mounts,
            # a node that halts says why in its last log lines (a failed metadata log directory
            # names the directory): they become the termination message the operator reads
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                "capabilities": {"drop": ["ALL"]}},
        }
        if pool.resources is not None:
            container["resources"] = {"requests": dict(pool.resources.requests),
                                      "limits": dict(pool.resources.limits)}
        if with_probes:
            ports = []
            if Role.CONTROLLER in pool.roles:
                ports.append({"name": "controller", "containerPort": cluster.spec.controller_port})
            if Role.BROKER in pool.roles:
                ports += [{"name": ln.name.lower().replace("_", "-")[:15], "containerPort": ln.port}
                          for ln in cluster.spec.listeners]
                if cluster.spec.tls is not None:
                    ports.append({"name": "replication", "containerPort": cluster.spec.tls.replication_port})
            if pool.implementation is Implementation.APACHE_KAFKA and Role.CONTROLLER in pool.roles:
                # asked of raft (module docstring); a Python process per probe: generous period and
                # timeout on a loaded node. No liveness probe (a Kafka node has no /healthz).
                container["ports"] = ports
                container["readinessProbe"] = {
                    "exec": {"command": ["python3", "-m", "kraft_operator.runtime.controller_probe",
                                         "--config", CONFIG_PATH]},
                    "initialDelaySeconds": 5, "periodSeconds": 10, "timeoutSeconds": 30, "failureThreshold": 3}
            elif pool.implementation is Implementation.APACHE_KAFKA:
                # Kafka's broker opens its listeners once caught up and acknowledged (module docstring);
                # no liveness probe: a long log recovery keeps them closed and must not be killed
                container["ports"] = ports
                container["readinessProbe"] = {"tcpSocket": {"port": cluster.spec.listeners[0].port},
                                               "periodSeconds": 2, "failureThreshold": 3}
            else:
                ports.append({"name": "metrics", "containerPort": METRICS_PORT})
                container["ports"] = ports
                container["readinessProbe"] = {"httpGet": {"path": "/readyz", "port": METRICS_PORT},
                                               "periodSeconds": 2, "failureThreshold": 3}
                container["livenessProbe"] = {"httpGet": {"path": "/healthz", "port": METRICS_PORT},
                                              "initialDelaySeconds": 30, "periodSeconds": 10, "failureThreshold": 6}
        spec: dict[str, Any] = {
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": cluster.spec.lifecycle.termination_grace_period_seconds,
            "enableServiceLinks": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": POD_UID, "runAsGroup": POD_UID,
                                "fsGroup": POD_UID, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
            "volumes": [*volumes, {"name": "tmp", "emptyDir": {}}],
        }
        container["volumeMounts"].append({"name": "tmp", "mountPath": "/tmp"})
        if pool.node_affinity:
            spec["affinity"] = {"nodeAffinity": dict(pool.node_affinity)}
        return spec

    async def _record_directory_ids(self, cluster: KRaftCluster, node: NodeRef) -> None:
        """Copy what the format Job reported (cluster id, directory id) onto the node's PVCs, so the
        facts outlive the Job's pod."""
        observed = await self.observe(cluster)
        facts = observed.nodes.get(node.node_id)
        for volume in facts.volumes if facts is not None else ():
            if volume.directory_id is None or volume.cluster_id is None:
                continue
            annotations = {ANNOTATION_DIRECTORY_ID: volume.directory_id, ANNOTATION_CLUSTER_ID: volume.cluster_id}
            await self._call(self._core.patch_namespaced_persistent_volume_claim,
                             claim_name(node, volume.volume_id), node.namespace,
                             {"metadata": {"annotations": annotations}})

    # --- deletion (the finalizer's part) -------------------------------------------------------

    async def delete_claims(self, cluster: KRaftCluster) -> list[str]:
        """Delete the PVCs whose volume has `deleteClaim: true`; the others stay. Returns the deleted."""
        namespace = _namespace(cluster)
        claims = await self._call(self._core.list_namespaced_persistent_volume_claim, namespace,
                                  label_selector=f"{LABEL_CLUSTER}={cluster.metadata.name}")
        policy = {(pool.name, volume.id): volume.delete_claim
                  for pool in cluster.spec.node_pools for volume in pool.storage.volumes}
        deleted = []
        for claim in claims.items:
            labels = claim.metadata.labels or {}
            key = (labels.get(LABEL_POOL, ""), int(labels.get(LABEL_VOLUME_ID, "-1")))
            if policy.get(key, False):
                try:
                    await self._call(self._core.delete_namespaced_persistent_volume_claim,
                                     claim.metadata.name, namespace)
                except ApiException as e:
                    if e.status != 404:
                        raise
                deleted.append(claim.metadata.name)
        return deleted

    # --- plumbing ------------------------------------------------------------------------------

    async def _call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A client call in a worker thread. Its answers are the client's models, used as Any: their
        fields are all Optional in the client's types, though the API server always sets them."""
        return await asyncio.to_thread(method, *args, **kwargs)

    async def _read_optional(self, method: Callable[..., Any], *args: Any) -> Any:
        try:
            return await self._call(method, *args)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    async def _create_if_absent(self, body: dict[str, Any]) -> None:
        try:
            await self._call(self._create_function(body), body["metadata"]["namespace"], body)
        except ApiException as e:
            if e.status == 409:
                return
            raise RuntimeActionError(_api_error(body, e)) from None

    async def _apply_object(self, body: dict[str, Any]) -> None:
        """Server-side apply as the operator's field manager: creates, or brings our fields in step."""
        name, namespace = body["metadata"]["name"], body["metadata"]["namespace"]
        patch = {
            "Service": self._core.patch_namespaced_service,
            "ConfigMap": self._core.patch_namespaced_config_map,
            "PodDisruptionBudget": self._policy.patch_namespaced_pod_disruption_budget,
            "NetworkPolicy": self._networking.patch_namespaced_network_policy,
        }[body["kind"]]
        try:
            await self._call(patch, name, namespace, body, field_manager=_MANAGER, force=True,
                             _content_type="application/apply-patch+yaml")
        except ApiException as e:
            raise RuntimeActionError(_api_error(body, e)) from None

    def _create_function(self, body: dict[str, Any]) -> Any:
        return {
            "Pod": self._core.create_namespaced_pod,
            "PersistentVolumeClaim": self._core.create_namespaced_persistent_volume_claim,
            "Job": self._batch.create_namespaced_job,
        }[body["kind"]]


def _add_rack_init(spec: dict[str, Any]) -> None:
    """The init container that writes server.properties with broker.rack (see `rack_init`), its
    downward-API view of the pod's annotations, and the emptyDir the broker then starts from."""
    main = spec["containers"][0]
    rack_mount = {"name": "rack-config", "mountPath": RACK_CONFIG_DIR}
    pod_info = {"name": "pod-info", "mountPath": POD_INFO_DIR, "readOnly": True}
    config_mount = next(m for m in main["volumeMounts"] if m["name"] == "config")
    spec["initContainers"] = [{
        "name": "rack",
        "image": main["image"],
        "imagePullPolicy": main["imagePullPolicy"],
        "command": ["python3", "-m", "kraft_operator.runtime.rack_init", "--annotations",
                    f"{POD_INFO_DIR}/annotations", "--config", CONFIG_PATH, "--output", RACK_CONFIG_PATH],
        "volumeMounts": [config_mount, pod_info, rack_mount],
        "securityContext": main["securityContext"],
    }]
    main["volumeMounts"].append({**rack_mount, "readOnly": True})
    spec["volumes"] += [
        {"name": "rack-config", "emptyDir": {}},
        {"name": "pod-info", "downwardAPI": {"items": [{"path": "annotations",
                                                        "fieldRef": {"fieldPath": "metadata.annotations"}}]}},
    ]


async def read_log_dir_ids(url: str, *, timeout_s: float) -> tuple[str, dict[str, str]] | None:
    """(cluster id, log directory path -> directory id) from an engine broker's `/kraftwerk/status`
    at `url`; None when it does not answer in time or answers without them."""
    def fetch() -> Any:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            return json.loads(answer.read())

    try:
        status = await asyncio.to_thread(fetch)
    except (OSError, ValueError):
        return None
    if not isinstance(status, dict) or not isinstance(status.get("cluster_id"), str):
        return None
    ids = {str(d["path"]).rstrip("/"): str(d["directory_id"]) for d in status.get("log_dirs") or []
           if isinstance(d, dict) and d.get("path") and d.get("directory_id")}
    return status["cluster_id"], ids


def _namespace(cluster: KRaftCluster) -> str:
    return cluster.metadata.namespace or "default"


def _api_error(body: Mapping[str, Any], error: ApiException) -> str:
    reason = error.reason
    with contextlib.suppress(ValueError):
        reason = json.loads(error.body or "{}").get("message", reason)
    return f"{body['kind']} {body['metadata']['name']}: {error.status} {reason}"


def _pod_facts(pod: Any) -> dict[str, Any]:
    status = pod.status
    phase = PodPhase(status.phase) if status.phase in PodPhase.__members__.values() else PodPhase.PENDING
    if pod.metadata.deletion_timestamp is not None:
        phase = PodPhase.PENDING if phase is PodPhase.RUNNING else phase
    ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])
    annotations = pod.metadata.annotations or {}
    labels = pod.metadata.labels or {}
    version = labels.get("app.kubernetes.io/version")
    if version is not None and labels.get(LABEL_IMPLEMENTATION) == Implementation.APACHE_KAFKA.value:
        version = f"kafka {version}"  # as the local runtime names it
    facts: dict[str, Any] = {"phase": phase, "ready": ready and pod.metadata.deletion_timestamp is None,
                             "version": version,
                             "restart_requested": MANUAL_ROLL_ANNOTATION in annotations}
    if phase is PodPhase.RUNNING:
        facts["started_revision"] = annotations.get(ANNOTATION_REVISION) or None
    for container in status.container_statuses or []:
        if container.name != _CONTAINER:
            continue
        facts["restarts"] = container.restart_count or 0
        running = container.state.running if container.state else None
        if phase is PodPhase.RUNNING and running is not None and running.started_at is not None:
            # the running process's start (a container restarted in place counts as a new start)
            facts["started_at_ms"] = int(running.started_at.timestamp() * 1000)
        ended = (container.state and container.state.terminated) or (
            container.last_state and container.last_state.terminated)
        if ended is not None:
            facts["exit_code"] = ended.exit_code
            facts["message"] = (ended.message or ended.reason or "").strip()[-500:]
        elif container.state and container.state.waiting and container.state.waiting.reason:
            facts["message"] = f"{container.state.waiting.reason}: {container.state.waiting.message or ''}".strip()
    return facts


def _job_facts(jobs: list[Any], pods: list[Any]) -> tuple[dict[int, FormatJobFacts], dict[int, str]]:
    """The newest format Job of each node, with the directory ids its pod reported; and for each node
    whose Job succeeded, the cluster id its directories were formatted with."""
    newest: dict[int, Any] = {}
    for job in jobs:
        labels = job.metadata.labels or {}
        if labels.get("app.kubernetes.io/component") != "format" or LABEL_NODE_ID not in labels:
            continue
        node_id = int(labels[LABEL_NODE_ID])
        if node_id not in newest or job.metadata.creation_timestamp > newest[node_id].metadata.creation_timestamp:
            newest[node_id] = job
    facts: dict[int, FormatJobFacts] = {}
    cluster_ids: dict[int, str] = {}
    for node_id, job in newest.items():
        status = job.status
        conditions = {c.type: c for c in status.conditions or [] if c.status == "True"}
        report = _termination_report(job, pods)
        if "Complete" in conditions or (status.succeeded or 0) > 0:
            facts[node_id] = FormatJobFacts(node_id=node_id, phase=JobPhase.SUCCEEDED,
                                            directory_ids=report.get("directoryIds", {}))
            if isinstance(report.get("clusterId"), str):
                cluster_ids[node_id] = report["clusterId"]
        elif "Failed" in conditions:
            failed = conditions["Failed"]
            message = report.get("error") or failed.message or failed.reason or "format Job failed"
            facts[node_id] = FormatJobFacts(node_id=node_id, phase=JobPhase.FAILED, message=str(message))
        else:
            facts[node_id] = FormatJobFacts(node_id=node_id, phase=JobPhase.RUNNING)
    return facts, cluster_ids


def _termination_report(job: Any, pods: list[Any]) -> dict[str, Any]:
    """The JSON the newest finished pod of the Job left in its termination message."""
    uid = job.metadata.uid
    finished = []
    for pod in pods:
        if not any(ref.uid == uid for ref in pod.metadata.owner_references or []):
            continue
        for container in pod.status.container_statuses or []:
            ended = container.state.terminated if container.state else None
            if ended is not None and ended.message:
                finished.append((ended.finished_at, ended.exit_code, ended.message))
    for _, _, message in sorted(finished, key=lambda f: (f[1] == 0, f[0] or 0), reverse=True):
        try:
            report = json.loads(message)
        except ValueError:
            return {"error": message.strip()[-500:]}
        return report if isinstance(report, dict) else {}
    return {}


def _volume_facts(claim: Any, *, volume_id: int, path: str, node_id: int, job: FormatJobFacts | None,
                  job_cluster_id: str | None) -> VolumeFacts:
    """A PVC as a volume: formatted once its format Job reported its directory id and cluster id
    (or they were copied onto the claim when the node started)."""
    annotations = claim.metadata.annotations or {}
    directory_id = annotations.get(ANNOTATION_DIRECTORY_ID)
    cluster_id = annotations.get(ANNOTATION_CLUSTER_ID)
    if claim.status is not None and claim.status.phase == "Lost":
        # its PersistentVolume is gone: whatever was formatted on it is lost with it
        directory_id = cluster_id = None
    elif directory_id is None and job is not None and job.phase is JobPhase.SUCCEEDED:
        directory_id = job.directory_ids.get(path)
        cluster_id = job_cluster_id
    capacity = (claim.status.capacity or {}).get("storage") if claim.status is not None else None
    requested = ((claim.spec.resources.requests or {}).get("storage")
                 if claim.spec is not None and claim.spec.resources is not None else None)
    return VolumeFacts(volume_id=volume_id, path=path, cluster_id=cluster_id if directory_id else None,
                       node_id=node_id if directory_id else None, directory_id=directory_id,
                       size_bytes=_quantity_bytes(capacity) if capacity else None,
                       requested_bytes=_quantity_bytes(requested) if requested else None)


_SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def _quantity_bytes(quantity: str) -> int:
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if quantity.endswith(suffix):
            return int(float(quantity[: -len(suffix)]) * _SUFFIXES[suffix])
    return int(float(quantity))

