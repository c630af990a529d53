"""kubectl, helm and the Kubernetes client against the e2e cluster, for tests/k8s.

They talk to the API server through the host-side kubeconfig the cluster script writes
(127.0.0.1:E2E_HOST_PORT), with kubectl and helm from the e2e cache (else from PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STATE = Path(os.environ.get("E2E_STATE", REPO / ".e2e-state"))
CACHE = Path(os.environ.get(
    "E2E_CACHE", Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "kraftwerk-e2e"
))  # as e2e/cluster/config.sh
KUBECONFIG = STATE / "kubeconfig" / "host.yaml"
IMAGE = os.environ.get("KRAFTWERK_E2E_IMAGE", "kraftwerk:0.1.0")


def unavailable() -> str | None:
    """Why the e2e cluster cannot be used, or None."""
    unsupported = STATE / "unsupported"
    if unsupported.exists():
        return f"the e2e Kubernetes cannot run on this machine: {unsupported.read_text().strip()}"
    if not (STATE / "ready").exists() or not KUBECONFIG.exists():
        return "the e2e Kubernetes is not up (run: e2e/cluster/cluster up && e2e/cluster/image)"
    probe = subprocess.run([tool("kubectl"), "get", "--raw", "/readyz"], env=kube_env(), capture_output=True,
                           text=True, timeout=20, check=False)
    if probe.returncode != 0:
        return f"the e2e Kubernetes does not answer: {probe.stderr.strip()}"
    return None


def tool(name: str) -> str:
    cached = CACHE / "bin" / name
    if cached.exists():
        return str(cached)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not found")
    return found


def kube_env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(KUBECONFIG), "KUBECACHEDIR": str(STATE / "kubectl-cache")}


class Kube:
    """kubectl and helm against the e2e cluster, as a user would type them."""

    def __init__(self) -> None:
        self.env = kube_env()
        self.kubectl_bin = tool("kubectl")
        self.helm_bin = tool("helm")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.kubectl_bin, *args], input=stdin, env=self.env, capture_output=True,
                                text=True, timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(self, *args: str, check: bool = True, timeout_s: float = 400) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.helm_bin, *args], env=self.env, capture_output=True, text=True,
                                timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result
