"""The KRaftCluster CustomResourceDefinition, generated from the pydantic models.

The models in `kraft_operator.model` are the single source; this module turns their JSON schema
into a Kubernetes *structural* schema (every node typed, no `$ref`, no `anyOf` of types, no
`title`s, nullable optionals simply not required), keeps the defaults, bounds, patterns and CEL
rules the models carry, and adds the status subresource and the printer columns. `kraftwerk crd`
prints it; `crds/kraftclusters.kraftwerk.io.yaml` is that output checked in, and a test fails when
the two differ.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from kraft_operator.model import (
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    VERSION,
    KRaftClusterSpec,
    KRaftClusterStatus,
)

__all__ = ["PRINTER_COLUMNS", "crd_manifest", "crd_yaml", "structural_schema"]

PRINTER_COLUMNS: tuple[dict[str, Any], ...] = (
    {"name": "Ready", "type": "string", "jsonPath": '.status.conditions[?(@.type=="Ready")].status'},
    {"name": "Controllers", "type": "string", "jsonPath": ".status.controllers"},
    {"name": "Brokers", "type": "string", "jsonPath": ".status.brokers"},
    {"name": "Leader", "type": "integer", "jsonPath": ".status.quorum.leaderId"},
    {"name": "Epoch", "type": "integer", "jsonPath": ".status.quorum.leaderEpoch"},
    {"name": "URP", "type": "integer", "jsonPath": ".status.partitions.underReplicated"},
    {"name": "MetadataVersion", "type": "string", "jsonPath": ".status.metadataVersion.finalized"},
    {"name": "Operation", "type": "string", "jsonPath": ".status.operation.name"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)

# JSON-schema keywords a structural schema may not carry (or that only add noise to the CRD).
_DROPPED_KEYS = frozenset({"title", "examples", "$defs", "discriminator"})


def structural_schema(model: type[Any]) -> dict[str, Any]:
    """The OpenAPI v3 structural schema of a pydantic model, as a CRD version's schema takes it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    definitions: dict[str, Any] = raw.get("$defs", {})
    return _convert(raw, definitions)


def _resolve(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    """Inline a `$ref`, keeping the sibling keys (description, default, ...) of the referring node."""
    if "$ref" not in node:
        return node
    name = node["$ref"].rsplit("/", 1)[-1]
    merged = copy.deepcopy(definitions[name])
    merged.update({k: v for k, v in node.items() if k != "$ref"})
    return _resolve(merged, definitions)


def _convert(node: dict[str, Any], definitions: dict[str, Any]) -> dict[str, Any]:
    node = _resolve(node, definitions)
    if "anyOf" in node:
        # pydantic writes `X | None` as anyOf [X, null]; optional means "not required" here.
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"a structural schema cannot express anyOf {node['anyOf']!r}")
        rest = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(options[0], definitions), **rest}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYS or (key == "default" and value is None):
            continue
        if key == "const":
            out["enum"] = [value]
        elif key == "properties":
            out["properties"] = {name: _convert(child, definitions) for name, child in value.items()}
        elif key == "items":
            out["items"] = _convert(value, definitions)
        elif key == "additionalProperties":
            if value is False:
                continue  # extra="forbid": the API server prunes unknown fields instead
            if value is True or value == {}:
                out["x-kubernetes-preserve-unknown-fields"] = True
            else:
                out["additionalProperties"] = _convert(value, definitions)
        else:
            out[key] = copy.deepcopy(value)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out["type"] = "object"
    if "type" not in out:
        raise ValueError(f"a structural schema needs a type for every node: {node!r}")
    return out


def crd_manifest() -> dict[str, Any]:
    """The CustomResourceDefinition as a dict (what `kubectl apply` takes)."""
    spec_schema = structural_schema(KRaftClusterSpec)
    status_schema = structural_schema(KRaftClusterStatus)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "kraftwerk", "app.kubernetes.io/part-of": "kraftwerk"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": list(SHORT_NAMES),
                "categories": ["all", "kraftwerk"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(column) for column in PRINTER_COLUMNS],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "A KRaft cluster: controller and broker pools, run and observed by kraftwerk.",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The manifest as YAML, keys in the order written above (stable, so the checked-in file diffs well)."""
    header = "# Generated by `kraftwerk crd` from kraft_operator.model; do not edit by hand.\n"
    body: str = yaml.safe_dump(crd_manifest(), sort_keys=False, width=110)
    return header + body
