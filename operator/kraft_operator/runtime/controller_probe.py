"""The readiness probe of an Apache Kafka controller's pod, asked of raft.

A controller pod must be Ready only when raft says it leads or follows caught up, never because a
port answers (Strimzi #12760: Ready for hours while the quorum was wedged). The engine says so on
its own `/readyz`; Apache Kafka's controller has no such endpoint, and it opens its controller
listener before the quorum has a leader. So its pod runs this program as an exec probe: it asks
DescribeQuorum of the leader (found through the node's own controller listener, as
`kafka-metadata-quorum --bootstrap-controller` does) and exits 0 only when

- this node is the leader, or
- the leader reports this node (as a voter or an observer) caught up within the node's
  `controller.quorum.fetch.timeout.ms` (the leader's `lastCaughtUpTimestamp`, the rule the
  engine's `/readyz` applies to a follower).

Any other answer, or none within the timeout, exits 1 with the reason on stdout (the kubelet shows
it in the pod's events).

    python3 -m kraft_operator.runtime.controller_probe --config /etc/kraftwerk/server.properties
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from kraft_engine.admin import QuorumAdmin, QuorumAdminError, QuorumDescription
from kraft_engine.protocol.security import ClientSecurity, listener_client_security
from kraft_engine.storage.java_properties import parse_properties

__all__ = ["controller_address", "controller_security", "main", "readiness"]

_FETCH_TIMEOUT_MS_DEFAULT = 2000


def readiness(quorum: QuorumDescription, *, node_id: int, now_ms: int, fetch_timeout_ms: int) -> tuple[bool, str]:
    """Whether the node is the leader or caught up with it, and why (pure)."""
    if quorum.leader_id == node_id:
        return True, f"node {node_id} leads epoch {quorum.leader_epoch}"
    if quorum.leader_id < 0:
        return False, "no leader"
    replica = next((r for r in (*quorum.voters, *quorum.observers) if r.replica_id == node_id), None)
    if replica is None:
        return False, f"leader {quorum.leader_id} does not list node {node_id}"
    lag_ms = now_ms - replica.last_caught_up_timestamp_ms
    if replica.last_caught_up_timestamp_ms < 0 or lag_ms > fetch_timeout_ms:
        return False, (f"node {node_id} last caught up with leader {quorum.leader_id} "
                       f"{'never' if replica.last_caught_up_timestamp_ms < 0 else f'{lag_ms} ms ago'} "
                       f"(controller.quorum.fetch.timeout.ms {fetch_timeout_ms})")
    return True, f"node {node_id} caught up with leader {quorum.leader_id} {max(lag_ms, 0)} ms ago"


def controller_address(config: dict[str, str]) -> tuple[str, int]:
    """This node's controller listener, as it advertises it (the pod's DNS name and port)."""
    name = config.get("controller.listener.names", "CONTROLLER").split(",")[0].strip()
    for listeners in (config.get("advertised.listeners", ""), config.get("listeners", "")):
        for listener in listeners.split(","):
            listener_name, _, rest = listener.strip().partition("://")
            if listener_name == name and rest:
                host, _, port = rest.rpartition(":")
                return host.strip("[]") or "127.0.0.1", int(port)
    raise ValueError(f"no {name} listener in the config")


def controller_security(config: dict[str, str]) -> ClientSecurity | None:
    """How this node reaches its own controller listener: the listener's security protocol with the
    node's own keystore (under spec.tls the node's certificate, a super user), as the node does."""
    name = config.get("controller.listener.names", "CONTROLLER").split(",")[0].strip()
    protocols = dict(entry.strip().split(":", 1) for entry in config.get("listener.security.protocol.map", "").split(",")
                     if ":" in entry)
    protocol = protocols.get(name, "PLAINTEXT")
    if protocol == "PLAINTEXT":
        return None
    return listener_client_security(config, listener_name=name, security_protocol=protocol,
                                    mechanism_key="sasl.mechanism.controller.protocol")


async def _probe(config: dict[str, str], *, timeout_ms: int) -> tuple[bool, str]:
    node_id = int(config["node.id"])
    fetch_timeout_ms = int(config.get("controller.quorum.fetch.timeout.ms", _FETCH_TIMEOUT_MS_DEFAULT))
    admin = QuorumAdmin([controller_address(config)], timeout_ms=timeout_ms, security=controller_security(config))
    try:
        quorum = await admin.describe_quorum()
    except QuorumAdminError as e:
        return False, f"DescribeQuorum: {e}"
    finally:
        await admin.close()
    return readiness(quorum, node_id=node_id, now_ms=int(time.time() * 1000), fetch_timeout_ms=fetch_timeout_ms)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kraft_operator.runtime.controller_probe",
                                     description="Exit 0 when raft says this controller leads or is caught up.")
    parser.add_argument("--config", required=True, help="the node's server.properties")
    parser.add_argument("--timeout-ms", type=int, default=3000)
    args = parser.parse_args(argv)
    try:
        config = parse_properties(Path(args.config).read_text(encoding="utf-8"))
        ready, why = asyncio.run(_probe(config, timeout_ms=args.timeout_ms))
    except (OSError, ValueError, KeyError) as e:
        ready, why = False, f"{type(e).__name__}: {e}"
    print(("ready: " if ready else "not ready: ") + why)
    return 0 if ready else 1


if __name__ == "__main__":
    sys.exit(main())
