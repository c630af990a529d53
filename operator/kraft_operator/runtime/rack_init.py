"""The init container of a rack-aware broker pod: its `server.properties` plus `broker.rack`.

A broker's rack is a label of the Kubernetes node its pod lands on (`rack.topologyKey`, by default
`topology.kubernetes.io/zone`), known only once the scheduler has placed the pod. The pod itself gets
no API credentials for it: the operator reads the node's label when it sees the pod scheduled and
writes it on the pod as the annotation `kraftwerk.io/broker-rack` (empty when the node has no such
label). The kubelet refreshes a downward-API volume of the pod's annotations, so this program waits
for the annotation to appear there, then writes the ConfigMap's `server.properties` with
`broker.rack` set (left out when empty) where the broker starts from.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kraft_engine.storage.java_properties import JavaPropertiesError, format_properties, parse_properties

__all__ = ["RACK_ANNOTATION", "RackInitError", "main", "parse_annotations", "rack_config"]

RACK_ANNOTATION = "kraftwerk.io/broker-rack"
_POLL_INTERVAL_S = 0.5


class RackInitError(Exception):
    """The annotations file or the config cannot be read; the message says which."""


def parse_annotations(text: str) -> dict[str, str]:
    """The downward API's annotations file: one `key="value"` per line, the value a Go-quoted string."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, quoted = line.partition("=")
        if not sep:
            continue
        if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
            raise RackInitError(f"annotation {key!r} is not a quoted string: {quoted!r}")
        found[key] = _unquote(quoted[1:-1])
    return found


def _unquote(body: str) -> str:
    # Go's strconv.Quote: backslash escapes for quote, backslash and control characters (\n, \t, \xNN,
    # \uNNNN); label values are [A-Za-z0-9._-], so anything beyond the simple escapes is refused.
    out: list[str] = []
    escapes = {'"': '"', "\\": "\\", "n": "\n", "t": "\t", "r": "\r"}
    i = 0
    while i < len(body):
        char = body[i]
        if char == "\\":
            if i + 1 >= len(body) or body[i + 1] not in escapes:
                raise RackInitError(f"unsupported escape in annotation value {body!r}")
            out.append(escapes[body[i + 1]])
            i += 2
            continue
        out.append(char)
        i += 1
    return "".join(out)


def rack_config(config_text: str, rack: str) -> str:
    """The node's server.properties with `broker.rack` (removed when `rack` is empty)."""
    try:
        properties = parse_properties(config_text)
    except JavaPropertiesError as e:
        raise RackInitError(f"the node's server.properties: {e}") from None
    properties.pop("broker.rack", None)
    if rack:
        properties["broker.rack"] = rack
    return format_properties(properties, comments=("written by kraftwerk's rack init container",))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kraft_operator.runtime.rack_init",
        description="Wait for the pod's broker-rack annotation, then write server.properties with broker.rack.",
    )
    parser.add_argument("--annotations", required=True, help="the downward-API file of the pod's annotations")
    parser.add_argument("--config", required=True, help="the node's server.properties (from its ConfigMap)")
    parser.add_argument("--output", required=True, help="where to write server.properties with broker.rack")
    parser.add_argument("--timeout-s", type=float, default=600.0, help="give up after this long (exit 1)")
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout_s
    annotations_path = Path(args.annotations)
    try:
        while True:
            text = annotations_path.read_text(encoding="utf-8") if annotations_path.exists() else ""
            annotations = parse_annotations(text)
            if RACK_ANNOTATION in annotations:
                break
            if time.monotonic() >= deadline:
                print(f"rack-init: no {RACK_ANNOTATION} annotation after {args.timeout_s:.0f} s "
                      "(the operator sets it once the pod is scheduled)", file=sys.stderr)
                return 1
            time.sleep(_POLL_INTERVAL_S)
        rack = annotations[RACK_ANNOTATION]
        output = rack_config(Path(args.config).read_text(encoding="utf-8"), rack)
    except (RackInitError, OSError) as e:
        print(f"rack-init: {e}", file=sys.stderr)
        return 1
    target = Path(args.output)
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(output, encoding="utf-8")
    tmp.replace(target)
    print(f"rack-init: broker.rack={rack}" if rack else "rack-init: the node has no rack label; no broker.rack")
    return 0


if __name__ == "__main__":
    sys.exit(main())
