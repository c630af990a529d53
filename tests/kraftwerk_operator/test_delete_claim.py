"""A node that leaves in a scale-down has its volumes handled per the spec's `deleteClaim`: the
plan's StopNode names the volumes whose policy is `true` (none by default), and the local runtime
deletes exactly those directories after the node's controlled shutdown, keeping the others."""

from __future__ import annotations

import asyncio
from pathlib import Path

from kraft_operator.model import Implementation
from kraft_operator.plan import NodeRef, StopNode
from kraft_operator.runtime.local import LocalRuntime

from .builders import WITH_BROKERS, cluster_from
from .sim import ScaleScenario


def _stops(scenario: ScaleScenario) -> dict[int, tuple[int, ...]]:
    return {a.node.node_id: a.delete_volumes for r in scenario.results for a in r.actions if isinstance(a, StopNode)}


def test_the_scale_down_keeps_volumes_by_default_and_names_those_with_delete_claim() -> None:
    kept = ScaleScenario(seed=4)
    violations, finished = kept.run()
    assert violations == [] and finished
    assert _stops(kept) == {7: (), 8: (), 6: ()}
    deleting = ScaleScenario(seed=4, delete_claims=True)
    violations, finished = deleting.run()
    assert violations == [] and finished
    # Broker 6's second volume says deleteClaim: true; the controllers' volumes do not.
    assert _stops(deleting) == {7: (), 8: (), 6: (1,)}
    reason = next(a.reason for r in deleting.results for a in r.actions if isinstance(a, StopNode) and a.node.node_id == 6)
    assert "[1] deleted (deleteClaim: true)" in reason


def test_the_local_runtime_deletes_only_the_named_volumes(tmp_path: Path) -> None:
    cluster = cluster_from(WITH_BROKERS)
    runtime = LocalRuntime(tmp_path)
    node_dir = runtime.cluster_dir(cluster) / "node-6"
    for volume in ("data-0", "data-1"):
        (node_dir / volume / "topic-0").mkdir(parents=True)
        (node_dir / volume / "topic-0" / "00000000000000000000.log").write_bytes(b"records")
    stop = StopNode(node=NodeRef("ns", "demo", "brokers", 6), implementation=Implementation.KRAFTWERK,
                    grace_period_ms=1000, reason="test", delete_volumes=(1,))
    asyncio.run(runtime.apply(cluster, stop))
    assert (node_dir / "data-0" / "topic-0" / "00000000000000000000.log").read_bytes() == b"records"
    assert not (node_dir / "data-1").exists()
    assert "volume(s) [1] deleted (deleteClaim: true), [0] kept" in (node_dir / "server.log").read_text()
    # Nothing named: nothing deleted, and the node's log says so (it said "[] deleted" before).
    asyncio.run(runtime.apply(cluster, StopNode(node=NodeRef("ns", "demo", "brokers", 6),
                                                implementation=Implementation.KRAFTWERK, grace_period_ms=1000,
                                                reason="test", delete_volumes=())))
    assert (node_dir / "data-0" / "topic-0" / "00000000000000000000.log").read_bytes() == b"records"
    assert (node_dir / "server.log").read_text().splitlines()[-1].endswith("volume(s) [0] kept (deleteClaim: false)")
    asyncio.run(runtime.close())
