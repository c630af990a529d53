"""The INCONSISTENT_CLUSTER_ID probe dials a secured controller listener as the node's raft client
does: a peer of another cluster on an mTLS controller listener is asked its cluster id over mTLS,
and the ERROR line names it (before, the probe dialled plaintext, its handshake failed and the
line said "unknown")."""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

import pytest
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v17.request import FetchRequest
from kio.schema.types import BrokerId
from pki import CertificateAuthority
from prometheus_client import CollectorRegistry

from kraft_engine.protocol import RequestContext
from kraft_engine.protocol.security import ClientSecurity, client_security, listener_security
from kraft_engine.server.cluster_id_refusals import ClusterIdRefusals
from kraft_engine.server.raft_metrics import RaftMetrics

DESCRIBE_CLUSTER = 60
OURS = "MkU3OEVBNTcwNTJENDM2Qw"
THEIRS = "b8tKLKnJQKSHzhvA8OZ7rw"
LOGGER = "kraft_engine.server.cluster_id_refusals"


@pytest.fixture(scope="module")
def ca() -> CertificateAuthority:
    return CertificateAuthority("cluster-ca")


def _node_security(ca: CertificateAuthority) -> ClientSecurity:
    issued = ca.issue("node-1", organization="kraftwerk")
    return client_security({
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.certificates": ca.certificate_pem,
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": issued.chain_pem,
        "ssl.keystore.key": issued.key_pem})


async def _describe_cluster(_request: Any, _ctx: RequestContext) -> DescribeClusterResponse:
    return DescribeClusterResponse(throttle_time=timedelta(0), error_code=ErrorCode.none, endpoint_type=2,
                                   cluster_id=THEIRS, controller_id=BrokerId(3), brokers=())


async def _error_line_after_a_refusal(listener: Any, security: ClientSecurity | None,
                                      caplog: pytest.LogCaptureFixture) -> str:
    refusals = ClusterIdRefusals(cluster_id=OURS, metrics=RaftMetrics(CollectorRegistry(), node=lambda: None),
                                 clock_ms=lambda: 0, security=security)
    try:
        with caplog.at_level(logging.ERROR, logger=LOGGER):
            refusals.outbound(FetchRequest.__new__(FetchRequest), node_id=3, address=listener.address)
            async with asyncio.timeout(60):
                while not [r for r in caplog.records if r.name == LOGGER]:
                    await asyncio.sleep(0.05)
    finally:
        await refusals.close()
    [line] = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    return line


async def _tls_controller(make_listener: Any, ca: CertificateAuthority) -> Any:
    server = ca.issue("node-3", organization="kraftwerk")
    return await make_listener(name="CONTROLLER", metadata=False,
                               routes={DESCRIBE_CLUSTER: (0, 1, _describe_cluster)},
                               security=listener_security({
                                   "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": server.chain_pem,
                                   "ssl.keystore.key": server.key_pem, "ssl.truststore.type": "PEM",
                                   "ssl.truststore.certificates": ca.certificate_pem, "ssl.client.auth": "required",
                               }, listener_name="CONTROLLER", security_protocol="SSL"))


async def test_the_probe_asks_an_mtls_controller_listener_with_the_nodes_security(make_listener, ca, caplog):
    listener = await _tls_controller(make_listener, ca)
    line = await _error_line_after_a_refusal(listener, _node_security(ca), caplog)
    assert f"Node 3 at {listener.address[0]}:{listener.address[1]} refused our FetchRequest" in line
    assert f"its cluster id is '{THEIRS}', ours is '{OURS}'" in line


async def test_fault_a_probe_dialling_plaintext_learns_nothing_from_a_tls_listener(make_listener, ca, caplog):
    """The broken variant (the probe before this fix: no security) is what the test above catches."""
    listener = await _tls_controller(make_listener, ca)
    line = await _error_line_after_a_refusal(listener, None, caplog)
    assert "its cluster id is unknown (DescribeCluster failed)" in line
