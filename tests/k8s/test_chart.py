"""The Helm chart validated by the real API server (`helm install --dry-run=server`): every object
it renders is admitted (schemas, RBAC objects, the peering object), in both RBAC modes, and a value
the API server cannot accept is refused there rather than at install time."""

from __future__ import annotations

import pytest

from tests.k8s.conftest import REPO, Kube

CHART = str(REPO / "charts" / "kraftwerk")


def _kinds(manifest: str) -> list[str]:
    return sorted(line.split(":", 1)[1].strip() for line in manifest.splitlines() if line.startswith("kind:"))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], ["Deployment", "KopfPeering", "Role", "RoleBinding", "Service", "ServiceAccount"]),
        (["--set", "rbac.clusterWide=true"],
         ["ClusterKopfPeering", "ClusterRole", "ClusterRoleBinding", "Deployment", "Service", "ServiceAccount"]),
    ],
    ids=["namespaced", "cluster-wide"],
)
def test_server_side_dry_run_admits_every_object(kube: Kube, namespace: str, values: list[str],
                                                 expected: list[str]) -> None:
    result = kube.helm("install", "kraftwerk-dry", CHART, "--namespace", namespace, "--dry-run=server", *values)
    assert _kinds(result.stdout) == expected, result.stdout
    # a dry run creates nothing
    assert kube.kubectl("-n", namespace, "get", "deployment", "kraftwerk-dry", check=False).returncode != 0


def test_server_side_dry_run_watching_other_namespaces(kube: Kube, namespace: str) -> None:
    other = f"{namespace}-apps"
    kube.kubectl("create", "namespace", other)
    try:
        result = kube.helm("install", "kraftwerk-dry", CHART, "--namespace", namespace, "--dry-run=server",
                           "--set", f"watchNamespaces={{{other}}}")
        assert f"--namespace={other}" in result.stdout
        assert f"namespace: {other}" in result.stdout  # the Role and the peering object live there
    finally:
        kube.kubectl("delete", "namespace", other, "--wait=false", check=False)


def test_server_side_dry_run_refuses_what_the_api_server_refuses(kube: Kube, namespace: str) -> None:
    result = kube.helm("install", "kraftwerk-dry", CHART, "--namespace", namespace, "--dry-run=server",
                       "--set", "resources.requests.cpu=lots", check=False)
    assert result.returncode != 0
    assert "quantities must match the regular expression" in result.stderr, result.stderr
