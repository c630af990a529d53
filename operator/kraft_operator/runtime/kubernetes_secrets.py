"""Secrets on a Kubernetes API server: the `SecretStore` of the Kubernetes runtime.

A cluster's own Secrets (its CAs, each node's TLS material, the operator's identity, its users'
credentials) carry the cluster's labels and an owner reference to the KRaftCluster, so deleting
the cluster deletes them; a Secret the user brings (a CA, a listener certificate) is only read.
Values are text (PEM, passwords), base64-encoded in `data` as the API wants.
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from kraft_operator.model import API_VERSION, KIND, KRaftCluster

__all__ = ["KubernetesSecrets", "LABEL_SECRET_CLUSTER"]

LABEL_SECRET_CLUSTER = "kraftwerk.io/cluster"


class KubernetesSecrets:
    def __init__(self, core: k8s.CoreV1Api) -> None:
        self._core = core

    async def read(self, namespace: str, name: str) -> dict[str, str] | None:
        try:
            secret: Any = await asyncio.to_thread(self._core.read_namespaced_secret, name, namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise
        return {key: base64.b64decode(value).decode("utf-8") for key, value in (secret.data or {}).items()}

    async def write(self, namespace: str, name: str, data: dict[str, str], *, cluster: KRaftCluster) -> None:
        owner = []
        if cluster.metadata.uid is not None:
            owner = [{"apiVersion": API_VERSION, "kind": KIND, "name": cluster.metadata.name,
                      "uid": cluster.metadata.uid, "controller": True, "blockOwnerDeletion": True}]
        body: Any = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": owner,
                         "labels": {LABEL_SECRET_CLUSTER: cluster.metadata.name,
                                    "app.kubernetes.io/managed-by": "kraftwerk-operator"}},
            "data": {key: base64.b64encode(value.encode("utf-8")).decode("ascii") for key, value in data.items()},
        }
        try:
            await asyncio.to_thread(self._core.replace_namespaced_secret, name, namespace, body)
        except ApiException as e:
            if e.status != 404:
                raise
            await asyncio.to_thread(self._core.create_namespaced_secret, namespace, body)

    async def delete(self, namespace: str, name: str) -> None:
        try:
            await asyncio.to_thread(self._core.delete_namespaced_secret, name, namespace)
        except ApiException as e:
            if e.status != 404:
                raise

    async def names(self, namespace: str, *, prefix: str) -> list[str]:
        found: Any = await asyncio.to_thread(self._core.list_namespaced_secret, namespace)
        return sorted(s.metadata.name for s in found.items if s.metadata.name.startswith(prefix))
