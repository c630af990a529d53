"""The chart ships the CRD that `kraftwerk crd` generates (crds/ in the repository): the two never
drift apart."""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]


def test_the_chart_carries_the_generated_crd() -> None:
    generated = sorted((REPO / "crds").glob("*.yaml"))
    assert generated, "no CRD in crds/"
    for crd in generated:
        shipped = REPO / "charts" / "kraftwerk" / "crds" / crd.name
        assert shipped.exists(), f"charts/kraftwerk/crds/{crd.name} is missing"
        assert yaml.safe_load(shipped.read_text()) == yaml.safe_load(crd.read_text()), (
            f"charts/kraftwerk/crds/{crd.name} differs from crds/{crd.name}; copy it again")


def test_the_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((REPO / "charts" / "kraftwerk" / "Chart.yaml").read_text())
    project = (REPO / "pyproject.toml").read_text()
    assert f'version = "{chart["appVersion"]}"' in project
