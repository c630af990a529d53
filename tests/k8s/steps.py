"""Steps the Kubernetes tests share: apply a document, wait for a condition or a settled state,
run a script pod of the project's image, scale the operator.

They lived in test_operator.py and the other test modules imported them from there as private
names; one module of public steps makes that sharing explicit.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from .conftest import RELEASE
from .kube import IMAGE, REPO, Kube

__all__ = ["EXAMPLE", "apply_doc", "condition_of", "controllers_only_example", "scale_operator", "script_pod",
           "wait_ready", "wait_until"]

EXAMPLE = REPO / "examples" / "kraftcluster.yaml"


def wait_until(what: str, probe: Any, *, timeout_s: float = 300, every_s: float = 1.0) -> Any:
    """Poll `probe` until it returns something truthy; fail naming `what` and the last answer."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}; last: {last!r}")


def controllers_only_example() -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"]["nodePools"] = [p for p in doc["spec"]["nodePools"] if p["roles"] == ["controller"]]
    return doc


def apply_doc(kube: Kube, ns: str, doc: dict[str, Any], *, check: bool = True) -> Any:
    return kube.kubectl("-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump(doc), check=check)


def condition_of(resource: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in resource.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def wait_ready(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    """The KRaftCluster once its Ready condition is True (up to 10 min: a loaded machine)."""
    def ready() -> dict[str, Any] | None:
        resource = kube.json("-n", ns, "get", "kc", name)
        condition = condition_of(resource, "Ready")
        return resource if condition is not None and condition["status"] == "True" else None

    return dict(wait_until(f"the KRaftCluster {name} to be Ready", ready, timeout_s=600, every_s=2))


def script_pod(kube: Kube, ns: str, *, name: str, script: Path, args: list[str]) -> dict[str, Any]:
    """A pod of the project's image running `script` (from a ConfigMap of the same name, created
    here) with `args`, non-root, never restarted: the body to apply."""
    kube.kubectl("-n", ns, "create", "configmap", name, f"--from-file={script.name}={script}")
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "restartPolicy": "Never",
            "securityContext": {"runAsNonRoot": True, "runAsUser": 10001, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": name, "image": IMAGE, "imagePullPolicy": "Never",
                "command": ["python3", f"/script/{script.name}", *args],
                "volumeMounts": [{"name": "script", "mountPath": "/script"}],
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
            "volumes": [{"name": "script", "configMap": {"name": name}}],
        },
    }


def scale_operator(kube: Kube, ns: str, replicas: int) -> None:
    kube.kubectl("-n", ns, "scale", "deployment", RELEASE, f"--replicas={replicas}")

    def settled() -> bool:
        pods = kube.json("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=operator")["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                   and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]
        return len(pods) == replicas and len(running) == replicas

    wait_until(f"{replicas} operator pod(s)", settled, timeout_s=240, every_s=2)
