"""Small fleets of hand-built logs for tests that need more than one cluster in one run: the log
that walks through every kind of event (test_derivations.LOG) on three nodes, and a copy of it
as a second cluster whose third node has a torn tail (a problem row, failing checks)."""

from __future__ import annotations

from pathlib import Path

from log_builder import CLUSTER_ID, node_dir, write_segment
from test_derivations import LOG

__all__ = ["TORN_CLUSTER_ID", "WHOLE_CLUSTER_ID", "whole_and_torn"]

WHOLE_CLUSTER_ID = CLUSTER_ID
TORN_CLUSTER_ID = "VG9ybkNsdXN0ZXJJZDAwMA"


def whole_and_torn(root: Path) -> Path:
    for node_id in (1, 2, 3):
        write_segment(node_dir(root / "whole", node_id, cluster_id=WHOLE_CLUSTER_ID), LOG)
        write_segment(node_dir(root / "torn", node_id, cluster_id=TORN_CLUSTER_ID), LOG)
    (segment,) = (root / "torn" / "node-3" / "__cluster_metadata-0").glob("*.log")
    data = segment.read_bytes()
    segment.write_bytes(data[: len(data) - 20])  # a torn tail: the last batch half-written
    return root
