"""Kafka-protocol admin clients over the engine's protocol client: the library that `kraft`'s tools,
the tests and the operator share. It never imports the node's `server` package (import-linter
holds that), so the operator can talk to any KRaft node, ours or Apache Kafka's, without pulling
in a node's wiring."""

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.admin.quorum_admin import (
    ClusterDescription,
    QuorumAdmin,
    QuorumAdminError,
    QuorumDescription,
    ReplicaDescription,
)

__all__ = [
    "BrokerAdmin",
    "ClusterDescription",
    "ControllerAdmin",
    "ControllerAdminError",
    "QuorumAdmin",
    "QuorumAdminError",
    "QuorumDescription",
    "ReplicaDescription",
]
