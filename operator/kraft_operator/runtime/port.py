"""The runtime port: what the reconciler needs from whatever runs the nodes.

Two implementations share it: the Kubernetes runtime (Pods, PVCs, ConfigMaps, format Jobs) and the
local runtime (processes and directories on one machine, `kraft_operator.runtime.local`). The
planner never sees a runtime; it sees the runtime's `Layout` (pure) and the facts `observe`
returns, and it hands back actions for `apply`.

Contract:
- `layout(cluster)` is pure and stable: the same node always gets the same hosts, ports and paths.
- `observe(cluster)` reports what exists, never changes anything: one `NodeFacts` per node that
  has a pod/process, a config or a volume (keyed by node id), and one `FormatJobFacts` per format
  job that exists. `Observed.cluster` is left None (the admin client fills it).
- `apply(cluster, action)` performs one action and returns once it is started (a format job or a
  pod may still be running: the next `observe` says how it went). It is idempotent: applying the
  same action twice (an operator restarted between the two) does no harm. It raises
  `RuntimeActionError` when the action could not be performed.
- `close()` releases what the runtime holds (it does not stop the nodes).
- `secrets` keeps Secrets (a name, keys to text values) in a namespace: Kubernetes Secrets, or
  files only their owner reads on the local runtime. A Secret a cluster's own (`cluster` given)
  goes with the cluster; reading one that does not exist gives None.
"""

from __future__ import annotations

from typing import Protocol

from kraft_operator.model import KRaftCluster
from kraft_operator.plan import Action, Layout, Observed

__all__ = ["Runtime", "RuntimeActionError", "SecretStore"]


class RuntimeActionError(Exception):
    """An action the runtime could not perform; the message says which node and why."""


class SecretStore(Protocol):
    async def read(self, namespace: str, name: str) -> dict[str, str] | None: ...

    async def write(self, namespace: str, name: str, data: dict[str, str], *, cluster: KRaftCluster) -> None: ...

    async def delete(self, namespace: str, name: str) -> None: ...

    async def names(self, namespace: str, *, prefix: str) -> list[str]: ...


class Runtime(Protocol):
    name: str

    @property
    def secrets(self) -> SecretStore: ...

    def layout(self, cluster: KRaftCluster) -> Layout: ...

    async def observe(self, cluster: KRaftCluster) -> Observed: ...

    async def apply(self, cluster: KRaftCluster, action: Action) -> None: ...

    async def close(self) -> None: ...
