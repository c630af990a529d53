"""Naming a node of another cluster: INCONSISTENT_CLUSTER_ID refusals, logged and counted per peer.

A controller whose directories were formatted with another `cluster.id` (a disk from the wrong
cluster, a typo in a format Job) starts, refuses every raft request of its peers and is refused
by them, and never joins. That is right, but it must be loud: the operator's "cannot re-register"
runbook starts from a line that says which node, at which address, and which two cluster ids
disagree. Kafka logs `INCONSISTENT_CLUSTER_ID in FETCH response` as an ERROR on the refused side
only, without the ids.

Both sides are covered here:

- inbound: this node answered a raft request (or, on the active controller, a BrokerRegistration)
  with INCONSISTENT_CLUSTER_ID. The request carries the sender's cluster id, its node id and (from
  the socket) its address: one WARN line.
- outbound: a peer answered one of ours with INCONSISTENT_CLUSTER_ID. The response carries no
  cluster id, so the peer is asked with DescribeCluster (KIP-919, endpoint type 2, which both our
  controllers and Kafka's answer) before the line is written: one ERROR line. The probe dials
  with the security the refused request used (the node's controller listener: TLS, SASL), so a
  secured peer is asked as the node's raft client asks it.

Lines are rate-limited per peer and direction (one per `interval_ms`, with the number of refusals
suppressed since the last one); the counter `kraftwerk_raft_inconsistent_cluster_id_total` counts
every refusal per peer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kio.schema.describe_cluster.v1.request import DescribeClusterRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.protocol import ConnectionConfig, KafkaConnection, KafkaProtocolError
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.server.raft_metrics import RaftMetrics

__all__ = ["ClusterIdRefusals"]

logger = logging.getLogger(__name__)

_DEFAULT_INTERVAL_MS = 30_000
_CONTROLLER_ENDPOINT_TYPE = 2
_DESCRIBE_TIMEOUT_MS = 2000


def is_inconsistent_cluster_id(response: Any) -> bool:
    code = getattr(response, "error_code", None)
    return code is not None and int(code) == int(ErrorCode.inconsistent_cluster_id)


def sender_id(request: Any) -> int | None:
    """The node id a raft request names as its sender (None for admin requests)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)  # Fetch
    if hasattr(request, "replica_id"):
        return int(request.replica_id)  # FetchSnapshot
    if hasattr(request, "broker_id"):
        return int(request.broker_id)  # BrokerRegistration
    for topic in getattr(request, "topics", ()):
        for partition in getattr(topic, "partitions", ()):
            for name in ("replica_id", "candidate_id", "leader_id"):  # Vote; BeginQuorumEpoch, EndQuorumEpoch
                if hasattr(partition, name):
                    return int(getattr(partition, name))
    return None


def _api_name(message: Any) -> str:
    return type(message).__name__


class ClusterIdRefusals:
    """Logs (rate-limited) and counts INCONSISTENT_CLUSTER_ID refusals; see the module docstring."""

    def __init__(
        self,
        *,
        cluster_id: str,
        metrics: RaftMetrics,
        clock_ms: Callable[[], int],
        interval_ms: int = _DEFAULT_INTERVAL_MS,
        security: ClientSecurity | None = None,
    ) -> None:
        self._cluster_id = cluster_id
        self._security = security
        self._metrics = metrics
        self._clock_ms = clock_ms
        self._interval_ms = interval_ms
        self._last_logged_ms: dict[tuple[str, str], int] = {}
        self._suppressed: dict[tuple[str, str], int] = {}
        self._probes: set[asyncio.Task[None]] = set()

    def _due(self, key: tuple[str, str]) -> tuple[bool, int]:
        """Whether a line may be written now, and how many were suppressed before it."""
        now_ms = self._clock_ms()
        last = self._last_logged_ms.get(key)
        if last is not None and now_ms - last < self._interval_ms:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False, 0
        self._last_logged_ms[key] = now_ms
        return True, self._suppressed.pop(key, 0)

    def inbound(self, request: Any, response: Any, *, peer_address: tuple[str, int]) -> None:
        """This node answered `request` (from `peer_address`) with `response`."""
        if not is_inconsistent_cluster_id(response):
            return
        node = sender_id(request)
        peer = "unknown" if node is None else str(node)
        self._metrics.inconsistent_cluster_id.labels(peer=peer, direction="inbound").inc()
        due, suppressed = self._due((peer, "inbound"))
        if not due:
            return
        logger.warning(
            "Refused %s from node %s at %s:%d with INCONSISTENT_CLUSTER_ID: its cluster id is %r, ours is %r"
            " (is that node formatted for another cluster?)%s",
            _api_name(request), peer, peer_address[0], peer_address[1], getattr(request, "cluster_id", None),
            self._cluster_id, _suppressed_note(suppressed),
        )

    def outbound(self, request: Any, *, node_id: int, address: tuple[str, int]) -> None:
        """A peer (`node_id` at `address`) refused our `request` with INCONSISTENT_CLUSTER_ID."""
        peer = str(node_id)
        self._metrics.inconsistent_cluster_id.labels(peer=peer, direction="outbound").inc()
        due, suppressed = self._due((peer, "outbound"))
        if not due:
            return
        task = asyncio.get_running_loop().create_task(
            self._log_outbound(_api_name(request), peer=peer, address=address, suppressed=suppressed)
        )
        self._probes.add(task)
        task.add_done_callback(self._probes.discard)

    async def _log_outbound(self, api: str, *, peer: str, address: tuple[str, int], suppressed: int) -> None:
        theirs = await _describe_cluster_id(address, security=self._security)
        logger.error(
            "Node %s at %s:%d refused our %s with INCONSISTENT_CLUSTER_ID: its cluster id is %s, ours is %r"
            " (is this node's storage formatted for another cluster?)%s",
            peer, address[0], address[1], api, "unknown (DescribeCluster failed)" if theirs is None else repr(theirs),
            self._cluster_id, _suppressed_note(suppressed),
        )

    async def close(self) -> None:
        for task in list(self._probes):
            task.cancel()
        if self._probes:
            await asyncio.gather(*self._probes, return_exceptions=True)


def _suppressed_note(suppressed: int) -> str:
    return f"; {suppressed} more refusals since the last line" if suppressed else ""


async def _describe_cluster_id(address: tuple[str, int], *, security: ClientSecurity | None) -> str | None:
    connection = KafkaConnection(address[0], address[1], config=ConnectionConfig(
        client_id="cluster-id-probe", request_timeout_ms=_DESCRIBE_TIMEOUT_MS,
        socket_connection_setup_timeout_ms=_DESCRIBE_TIMEOUT_MS, security=security,
    ))
    try:
        await connection.connect(timeout_ms=_DESCRIBE_TIMEOUT_MS)
        response = await connection.send(
            DescribeClusterRequest(
                include_cluster_authorized_operations=False, endpoint_type=i8(_CONTROLLER_ENDPOINT_TYPE)
            ),
            timeout_ms=_DESCRIBE_TIMEOUT_MS,
        )
    except (KafkaProtocolError, OSError, TimeoutError):
        return None
    finally:
        await connection.close()
    return str(response.cluster_id)
