"""`kraftwerk operator`: the kopf operator on the Kubernetes runtime, in a pod or from a kubeconfig.

In a pod (the Helm chart's Deployment) it authenticates as the pod's ServiceAccount; elsewhere with
the kubeconfig (`--kubeconfig`, else KUBECONFIG or ~/.kube/config), which kopf and the runtime's
client both read. It serves the operator's metrics on `--metrics-port` and kopf's liveness probe on
`--liveness-port`, and runs until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from typing import Any

import kopf

from kraft_operator.handlers.wiring import build_registry, configure, new_state
from kraft_operator.metrics import OperatorMetrics
from kraft_operator.runtime.kubernetes import KubernetesRuntime, api_client

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `kraftwerk operator` beyond namespaces, metrics port and peering name."""
    parser.add_argument("--kubeconfig", default=None, help="kubeconfig file (default: in-cluster, else KUBECONFIG)")
    parser.add_argument("--liveness-port", type=int, default=0, help="serve kopf's /healthz here (0: off)")
    parser.add_argument("--priority", type=int, default=None,
                        help="peering priority (default: random, so two replicas never tie)")
    parser.add_argument("--standalone", action="store_true", help="no peering: act alone")
    parser.add_argument("--cluster-domain", default="cluster.local", help="the cluster's DNS domain")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning"])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=getattr(logging, str(getattr(args, "log_level", "info")).upper()),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    kubeconfig = getattr(args, "kubeconfig", None)
    if kubeconfig:
        os.environ["KUBECONFIG"] = kubeconfig  # kopf's own login reads it too
    clusterwide = bool(args.all_namespaces)
    namespaces = list(args.namespace) if not clusterwide else []
    if not clusterwide and not namespaces:
        namespaces = [os.environ.get("POD_NAMESPACE", "default")]
    peering = None if getattr(args, "standalone", False) else args.peering
    try:
        asyncio.run(_operate(
            kubeconfig=kubeconfig, clusterwide=clusterwide, namespaces=namespaces, peering=peering,
            priority=getattr(args, "priority", None), metrics_port=args.metrics_port,
            liveness_port=getattr(args, "liveness_port", 0),
            cluster_domain=getattr(args, "cluster_domain", "cluster.local")))
    except KeyboardInterrupt:
        return 130
    return 0


async def _operate(*, kubeconfig: str | None, clusterwide: bool, namespaces: list[str], peering: str | None,
                   priority: int | None, metrics_port: int, liveness_port: int, cluster_domain: str) -> None:
    runtime = KubernetesRuntime(api_client(kubeconfig=kubeconfig), cluster_domain=cluster_domain)
    metrics = OperatorMetrics()
    if metrics_port:
        metrics.serve(metrics_port)
    state = new_state(runtime=runtime, metrics=metrics)
    registry = build_registry(state)

    @kopf.on.startup(registry=registry)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        configure(settings, peering=peering, clusterwide=clusterwide, priority=priority)

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # a private registry has none of kopf's default login handlers: use the kubernetes client's
        # (the ServiceAccount in a pod, else the kubeconfig)
        return kopf.login_via_client(**kwargs)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(**_: Any) -> None:
        await runtime.close()

    await kopf.operator(
        registry=registry,
        clusterwide=clusterwide,
        namespaces=namespaces,
        liveness_endpoint=f"http://0.0.0.0:{liveness_port}/healthz" if liveness_port else None,
        standalone=peering is None,
    )
