"""The Helm chart validated against the real API server: `helm install --dry-run=server` in both RBAC
modes, and the rendered objects through the API server's own dry run."""

from __future__ import annotations

import pytest

from .kube import REPO, Kube

CHART = str(REPO / "charts" / "kraftwerk")


@pytest.fixture(autouse=True)
def chart_crds(kube: Kube) -> None:
    """The chart's CRDs, as `helm install` applies them before its templates. A dry run installs no
    CRD, and the templates include a KopfPeering object whose kind the CRD defines."""
    kube.kubectl("apply", "--server-side", "-f", f"{CHART}/crds/")
    kube.kubectl("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev",
                 "crd/clusterkopfpeerings.kopf.dev", "crd/kraftclusters.kraftwerk.io", "--timeout=60s")


def _kinds(manifest: str) -> list[str]:
    return sorted(line.split(":", 1)[1].strip() for line in manifest.splitlines() if line.startswith("kind:"))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([], ["ClusterRole", "ClusterRoleBinding", "Deployment", "KopfPeering", "NetworkPolicy", "Role", "RoleBinding",
              "Service", "ServiceAccount"]),
        (["--set", "rbac.clusterWide=true"],
         ["ClusterKopfPeering", "ClusterRole", "ClusterRoleBinding", "Deployment", "NetworkPolicy", "Service",
          "ServiceAccount"]),
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


def test_rendered_objects_pass_the_api_servers_own_dry_run(kube: Kube, namespace: str) -> None:
    """`helm install --dry-run=server` checks the manifests against the server's OpenAPI schema
    only; the API server's own dry run (admission, defaulting, validation of every object) goes
    further. The chart passes it, and a value the API server cannot take is refused there."""
    rendered = kube.helm("template", "kraftwerk", CHART, "--namespace", namespace, "--kube-version", "1.34.4").stdout
    accepted = kube.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=rendered)
    assert "deployment.apps/kraftwerk created (server dry run)" in accepted.stdout, accepted.stdout
    bad = kube.helm("template", "kraftwerk", CHART, "--namespace", namespace, "--kube-version", "1.34.4",
                    "--set", "resources.requests.cpu=lots").stdout
    refused = kube.kubectl("-n", namespace, "apply", "--dry-run=server", "-f", "-", stdin=bad, check=False)
    assert refused.returncode != 0
    assert "quantities must match the regular expression" in refused.stderr, refused.stderr
