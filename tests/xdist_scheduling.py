"""How the suite's tests are shared out between pytest-xdist workers: a module's tests go to one
worker, in order, and every test of the Kubernetes tier to one worker.

A module's tests share module-scoped clusters (started once) and often the state its earlier
tests left (a topic created by the first one, say); the Kubernetes tier shares the one e2e cluster
and the chart's cluster-wide objects. Marking tests with `xdist_group` under `--dist loadgroup`
stopped working with pytest 9.2: xdist 3.8 renames a grouped test by assigning `item._nodeid`,
which pytest 9.2 no longer reads (its node id lives in `_id`), so every test was scheduled on its
own and a module's tests ran on both workers, each against clusters of its own. The scope is
therefore chosen here, through xdist's own `pytest_xdist_make_scheduler` hook (tests/conftest.py),
from the node id alone. tests/test_xdist_scheduling.py runs real workers to show it holds.
"""

from __future__ import annotations

from xdist.scheduler import LoadScopeScheduling

__all__ = ["ModuleScheduling", "scope_of"]

K8S_SCOPE = "k8s"


def scope_of(nodeid: str) -> str:
    """The work unit a test belongs to: its module's path, or "k8s" for the Kubernetes tier."""
    path = nodeid.split("::", 1)[0]
    return K8S_SCOPE if path.startswith("tests/k8s/") else path


class ModuleScheduling(LoadScopeScheduling):
    """xdist's load-by-scope scheduling with `scope_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return scope_of(nodeid)
