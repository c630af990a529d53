"""The CRD is generated from the models, checked in, structural, and says what the issue asks."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import yaml

from kraft_operator.cli import main
from kraft_operator.crd import crd_manifest, crd_yaml
from kraft_operator.model import KRaftCluster

from .builders import WITH_BROKERS, cluster_from

REPO = Path(__file__).resolve().parents[2]
CHECKED_IN = REPO / "crds" / "kraftclusters.kraftwerk.io.yaml"


def test_the_checked_in_crd_is_what_kraftwerk_crd_prints() -> None:
    out = io.StringIO()
    assert main(["crd"], out=out) == 0
    assert out.getvalue() == crd_yaml()
    assert CHECKED_IN.read_text(encoding="utf-8") == out.getvalue(), (
        "crds/kraftclusters.kraftwerk.io.yaml is stale: run `.venv/bin/kraftwerk crd > crds/kraftclusters.kraftwerk.io.yaml`"
    )


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    if isinstance(node, dict) and ("type" in node or "properties" in node or "items" in node):
        found.append((path, node))
        for name, child in node.get("properties", {}).items():
            found += _walk(child, f"{path}.{name}")
        if "items" in node:
            found += _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            found += _walk(node["additionalProperties"], f"{path}{{}}")
    return found


def test_the_schema_is_structural() -> None:
    version = crd_manifest()["spec"]["versions"][0]
    schema = version["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert "type" in node, f"{path} has no type"
        assert not {"$ref", "anyOf", "oneOf", "allOf", "title", "const"} & set(node), path
        assert node.get("additionalProperties") is not False, path
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item["required"], f"{path}: map key {key} must be required"


def test_resource_names_status_subresource_and_printer_columns() -> None:
    crd = crd_manifest()
    assert crd["metadata"]["name"] == "kraftclusters.kraftwerk.io"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == ("KRaftCluster", "kraftclusters", ["kc"])
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Ready", "Controllers", "Brokers", "Leader", "Epoch", "URP", "MetadataVersion", "Operation", "Age"]


def test_defaults_validation_and_cel_rules_are_in_the_schema() -> None:
    spec = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = spec["properties"]
    assert props["controllerPort"]["default"] == 9093
    assert props["listeners"]["default"] == [{"name": "PLAINTEXT", "port": 9092, "protocol": "PLAINTEXT"}]
    pool = props["nodePools"]["items"]
    assert pool["properties"]["roles"]["items"]["enum"] == ["controller", "broker"]
    assert pool["properties"]["replicas"]["minimum"] == 0
    rules = {r["rule"]: r for r in spec["x-kubernetes-validations"]}
    assert "self.nodePools.exists(p, 'controller' in p.roles && p.replicas > 0)" in rules
    assert any("oldSelf.clusterId" in r for r in rules)
    assert any(r["rule"] == "self.roles == oldSelf.roles" for r in pool["x-kubernetes-validations"])
    volume = pool["properties"]["storage"]["properties"]["volumes"]["items"]
    assert any(r["rule"] == "quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0"
               for r in volume["x-kubernetes-validations"])
    status = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert any("oldSelf.clusterId" in r["rule"] for r in status["x-kubernetes-validations"])
    for name in ("conditions", "clusterId", "quorum", "nodes", "partitions", "metadataVersion", "operation",
                 "observedGeneration"):
        assert name in status["properties"], name


def test_a_resource_round_trips_through_the_models() -> None:
    cluster = cluster_from(WITH_BROKERS)
    wire = cluster.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert wire["spec"]["nodePools"][1]["storage"]["volumes"][1] == {"id": 1, "size": "10Gi", "deleteClaim": False}
    assert KRaftCluster.model_validate(wire) == cluster
    again = yaml.safe_load(yaml.safe_dump(wire))
    assert KRaftCluster.model_validate(again) == cluster


def test_examples_parse() -> None:
    from kraft_operator.cli import load_cluster

    for path in sorted((REPO / "examples").glob("*.yaml")):
        load_cluster(path)
