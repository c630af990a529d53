"""Builders for the operator's tests: specs from YAML text and a fixed layout."""

from __future__ import annotations

import textwrap
from typing import Any

import yaml

from kraft_operator.model import KRaftCluster
from kraft_operator.plan import NodeRef

THREE_CONTROLLERS = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: demo, namespace: ns, generation: 1}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
"""

WITH_BROKERS = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {name: demo, namespace: ns, generation: 1}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 3
      storage: {volumes: [{id: 0, size: 1Gi}]}
    - name: brokers
      roles: [broker]
      replicas: 3
      implementation: apache-kafka
      storage: {type: jbod, volumes: [{id: 0, size: 10Gi}, {id: 1, size: 10Gi}]}
"""


def cluster_from(text: str, **spec_changes: Any) -> KRaftCluster:
    raw = yaml.safe_load(textwrap.dedent(text))
    raw["spec"].update(spec_changes)
    return KRaftCluster.model_validate(raw)


class FixedLayout:
    """Hosts n<id>.test, every port as the spec says, directories /data/<id>/<volume>."""

    def advertised_host(self, node: NodeRef) -> str:
        return f"n{node.node_id}.test"

    def bind_host(self, node: NodeRef) -> str:
        return ""

    def port(self, node: NodeRef, *, listener: str, spec_port: int) -> int:
        return spec_port

    def volume_path(self, node: NodeRef, *, volume_id: int) -> str:
        return f"/data/{node.node_id}/{volume_id}"

    def metrics_port(self, node: NodeRef) -> int | None:
        return 9404

    def tls_dir(self, node: NodeRef) -> str:
        return f"/tls/{node.node_id}"

    def certificate_hosts(self, node: NodeRef) -> tuple[str, ...]:
        return (f"n{node.node_id}.test",)
