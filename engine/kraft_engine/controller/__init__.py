"""The quorum controller: a single-threaded event loop over timeline state and the control
managers that generate records and, separately, replay them. Pure."""

from kraft_engine.controller.broker_heartbeat import (
    BrokerControlState,
    BrokerHeartbeatManager,
    BrokerHeartbeatTracker,
)
from kraft_engine.controller.configuration_control import OpType
from kraft_engine.controller.controller_metrics import ControllerMetrics
from kraft_engine.controller.event_handling import ControllerFault
from kraft_engine.controller.feature_control import FeatureControlManager, UpgradeType
from kraft_engine.controller.partition_change import Election, PartitionChange, PartitionChangeBuilder
from kraft_engine.controller.producer_ids_control import ProducerIdsBlock
from kraft_engine.controller.quorum_controller import QuorumController, bootstrap_metadata_version
from kraft_engine.controller.raft_port import AppendRefused, RaftAppendPort
from kraft_engine.controller.replica_placement import StripedReplicaPlacer, UsableBroker
from kraft_engine.controller.results import (
    ApiError,
    ControllerApiError,
    ControllerEffects,
    ControllerResult,
    FailedWrite,
    RecordAndVersion,
    RecordList,
    encode_records,
    records_only,
)
from kraft_engine.controller.timeline import SnapshotRegistry, TimelineHashMap, TimelineHashSet, TimelineValue

__all__ = [
    "ApiError",
    "AppendRefused",
    "BrokerControlState",
    "BrokerHeartbeatManager",
    "BrokerHeartbeatTracker",
    "ControllerApiError",
    "ControllerEffects",
    "ControllerFault",
    "ControllerMetrics",
    "ControllerResult",
    "Election",
    "FailedWrite",
    "FeatureControlManager",
    "OpType",
    "PartitionChange",
    "PartitionChangeBuilder",
    "ProducerIdsBlock",
    "QuorumController",
    "RaftAppendPort",
    "RecordAndVersion",
    "RecordList",
    "SnapshotRegistry",
    "StripedReplicaPlacer",
    "TimelineHashMap",
    "TimelineHashSet",
    "TimelineValue",
    "UpgradeType",
    "UsableBroker",
    "bootstrap_metadata_version",
    "encode_records",
    "records_only",
]
