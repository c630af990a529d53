"""The Kubernetes tier: tests against the e2e cluster's real API server, kubelet and containerd.

They need `e2e/cluster/cluster up` and `e2e/cluster/image` first (`.ci/run` does both). Without a
cluster every test here skips, and the skip says why: not started, or this machine cannot run it
(the reason `cluster preflight` recorded). They talk to the API server through the host-side
kubeconfig the cluster writes (127.0.0.1:E2E_HOST_PORT), with kubectl and helm from the e2e cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "e2e" / "cluster" / "cluster"
STATE = Path(os.environ.get("E2E_STATE", REPO / ".e2e-state"))
CACHE = Path(os.environ.get("E2E_CACHE", REPO / ".e2e-cache"))
KUBECONFIG = STATE / "kubeconfig" / "host.yaml"
IMAGE = os.environ.get("KRAFTWERK_E2E_IMAGE", "kraftwerk:e2e")


def _unavailable() -> str | None:
    unsupported = STATE / "unsupported"
    if unsupported.exists():
        return f"the e2e Kubernetes cannot run on this machine: {unsupported.read_text().strip()}"
    if not (STATE / "ready").exists() or not KUBECONFIG.exists():
        return "the e2e Kubernetes is not up (run: e2e/cluster/cluster up && e2e/cluster/image)"
    probe = subprocess.run([_tool("kubectl"), "get", "--raw", "/readyz"], env=_env(), capture_output=True,
                           text=True, timeout=20, check=False)
    if probe.returncode != 0:
        return f"the e2e Kubernetes does not answer: {probe.stderr.strip()}"
    return None


def _tool(name: str) -> str:
    cached = CACHE / "bin" / name
    if cached.exists():
        return str(cached)
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} not found")
    return found


def _env() -> dict[str, str]:
    return {**os.environ, "KUBECONFIG": str(KUBECONFIG), "KUBECACHEDIR": str(STATE / "kubectl-cache")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    if not ours:
        return
    for item in ours:
        item.add_marker(pytest.mark.k8s)
    reason = _unavailable()
    if reason is not None:
        for item in ours:
            item.add_marker(pytest.mark.skip(reason=reason))


class Kube:
    """kubectl and helm against the e2e cluster, as a user would type them."""

    def __init__(self) -> None:
        self.env = _env()
        self.kubectl_bin = _tool("kubectl")
        self.helm_bin = _tool("helm")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True,
                timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.kubectl_bin, *args], input=stdin, env=self.env, capture_output=True,
                                text=True, timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result

    def json(self, *args: str) -> dict:
        return json.loads(self.kubectl(*args, "-o", "json").stdout)

    def helm(self, *args: str, check: bool = True, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([self.helm_bin, *args], env=self.env, capture_output=True, text=True,
                                timeout=timeout_s, check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed ({result.returncode}): {result.stderr}")
        return result


@pytest.fixture(scope="session")
def kube() -> Kube:
    return Kube()


@pytest.fixture
def namespace(kube: Kube) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards (with everything in it)."""
    name = f"kw-{uuid.uuid4().hex[:8]}"
    kube.kubectl("create", "namespace", name)
    yield name
    kube.kubectl("delete", "namespace", name, "--wait=false", check=False)
