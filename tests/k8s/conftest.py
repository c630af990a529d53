"""The Kubernetes tier: tests against the e2e cluster's real API server, kubelet and containerd.

They need `e2e/cluster/cluster up` and `e2e/cluster/image` first (`.ci/run` does both). Without a
cluster every test here skips, and the skip says why: not started, or this machine cannot run it
(the reason `cluster preflight` recorded).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from .kube import IMAGE, REPO, Kube, unavailable

CHART = REPO / "charts" / "kraftwerk"
RELEASE = "kraftwerk"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    ours = [item for item in items if here in Path(str(item.fspath)).parents]
    if not ours:
        return
    reason = unavailable()
    for item in ours:
        item.add_marker(pytest.mark.k8s)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


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


def _image_ref() -> tuple[str, str]:
    repository, _, tag = IMAGE.rpartition(":")
    return repository, tag


@pytest.fixture(scope="module")
def operator_ns(kube: Kube) -> Iterator[str]:
    """A namespace with the operator installed by the chart (two replicas), torn down afterwards."""
    ns = f"kw-op-{uuid.uuid4().hex[:6]}"
    kube.kubectl("create", "namespace", ns)
    # `helm install` leaves a CRD that exists alone: bring the cluster's to this checkout's, as an
    # upgrade of the chart does (kubectl apply of its crds/ first)
    kube.kubectl("apply", "--server-side", "--force-conflicts", "-f", f"{CHART}/crds/")
    repository, tag = _image_ref()
    try:
        kube.helm("install", RELEASE, str(CHART), "--namespace", ns, "--wait", "--timeout", "5m",
                  "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                  "--set", "image.pullPolicy=Never", "--set", "logLevel=debug")
        yield ns
    finally:
        # also after a failed install: its release, cluster-scoped grants and namespace go
        kube.kubectl("-n", ns, "delete", "kraftclusters", "--all", "--wait=true", "--timeout=120s", check=False)
        kube.helm("uninstall", RELEASE, "--namespace", ns, "--wait", check=False)
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)
