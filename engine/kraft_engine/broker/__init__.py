"""The broker's decisions, pure like the controller's: its lifecycle with the controller quorum
(registration, heartbeats, controlled shutdown), the leader's ISR and high-watermark rules, and the
validation of produced record batches. The node shell (`server.broker_node`) performs the I/O."""

from kraft_engine.broker.lifecycle import (
    BrokerLifecycle,
    BrokerState,
    HeartbeatAnswer,
    HeartbeatRequest,
    RegistrationRequest,
)
from kraft_engine.broker.record_validation import ProduceRefused, ValidatedBatch, validate_produce_payload
from kraft_engine.broker.replica_state import FollowerState, LeaderReplicaState

__all__ = [
    "BrokerLifecycle",
    "BrokerState",
    "FollowerState",
    "HeartbeatAnswer",
    "HeartbeatRequest",
    "LeaderReplicaState",
    "ProduceRefused",
    "RegistrationRequest",
    "ValidatedBatch",
    "validate_produce_payload",
]
