"""The raft apis on a controller listener, at the version ranges Kafka 4.x nodes and tools send.

The raft core speaks one version of each api (`RaftNode.served_requests`). Apache Kafka 4.1's
controllers advertise ranges, and a Kafka node or tool picks the highest version both sides
support, so an older peer (a Kafka 3.x/4.0 controller during a roll, an older
`kafka-metadata-quorum`) sends an older version. This module serves each range by bridging an
older request up to the core's version and the response back down
(`protocol.version_bridging`), with explicit conversions where a version differs by more than
field names:

- Vote v0-v1 have no `pre_vote`: a real vote (`pre_vote=False`), as Kafka reads them.
- BeginQuorumEpoch v0 and EndQuorumEpoch v0 carry no leader endpoints (the receiver knows them
  from `controller.quorum.voters`); EndQuorumEpoch v0 lists `preferred_successors` by id, v1
  `preferred_candidates` with directory ids (none in v0).
- Fetch v4-v14 name the fetching replica in `replica_id`, v15+ in `replica_state`.
- Fetch v4-v12 name topics (`topic`), v13+ by id (`topic_id`): `__cluster_metadata` is the
  topic with the metadata topic id both ways; any other name gets the zero id, which the core
  refuses like any topic that is not the metadata partition. Their responses name the topic again.
  Fetch v4-v11 carry no `last_fetched_epoch` (and v4-v8 no `current_leader_epoch`): the core
  reads the defaults (-1) and answers INVALID_REQUEST, as Kafka's raft client validates them.

Each is authorized as Kafka's ControllerApis does before the raft client sees it: Vote,
BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot and UpdateRaftVoter need CLUSTER_ACTION on
the cluster (only nodes send them), DescribeQuorum DESCRIBE, AddRaftVoter and RemoveRaftVoter
ALTER. A refusal is the api's error response with CLUSTER_AUTHORIZATION_FAILED, and the core never
sees the request.

Kafka 4.1's controllers advertise Fetch 4-18 on their controller listener (the range Kafka 4.0
kept after KIP-896 removed v0-v3) and send v18 to each other; a KRaft peer of Kafka 3.x sends v13+.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from kraft_engine.kafka_uuid import ZERO_UUID
from kraft_engine.metadata.authorizer import AclOperation
from kraft_engine.protocol import Listener, RequestContext, make_entity
from kraft_engine.protocol.listener import Handler
from kraft_engine.protocol.version_bridging import Downgrade, Upgrade, bridge, bridged_handler
from kraft_engine.raft.messages import METADATA_TOPIC, METADATA_TOPIC_ID, update_voter_response
from kraft_engine.server.authorization import NodeAuthorizer

__all__ = ["RAFT_API_OPERATIONS", "RAFT_API_VERSIONS", "register_raft_apis"]

_FETCH: Final = 1
_VOTE: Final = 52
_BEGIN_QUORUM_EPOCH: Final = 53
_END_QUORUM_EPOCH: Final = 54

# {api key: (min, max)} served on the controller listener: Kafka 4.1's ranges for these apis,
# from the lowest version a KRaft peer or tool of Kafka 3.x/4.x sends to the core's own version.
RAFT_API_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    _FETCH: (4, 18),
    _VOTE: (0, 2),
    _BEGIN_QUORUM_EPOCH: (0, 1),
    _END_QUORUM_EPOCH: (0, 1),
    55: (0, 2),  # DescribeQuorum
    59: (0, 1),  # FetchSnapshot
    80: (0, 1),  # AddRaftVoter
    81: (0, 0),  # RemoveRaftVoter
    82: (0, 0),  # UpdateRaftVoter
}

_UPDATE_RAFT_VOTER: Final = 82
# {api key: the operation on the cluster it needs} (Kafka's ControllerApis).
RAFT_API_OPERATIONS: Final[Mapping[int, AclOperation]] = {
    _FETCH: AclOperation.CLUSTER_ACTION,
    _VOTE: AclOperation.CLUSTER_ACTION,
    _BEGIN_QUORUM_EPOCH: AclOperation.CLUSTER_ACTION,
    _END_QUORUM_EPOCH: AclOperation.CLUSTER_ACTION,
    55: AclOperation.DESCRIBE,
    59: AclOperation.CLUSTER_ACTION,
    80: AclOperation.ALTER,
    81: AclOperation.ALTER,
    _UPDATE_RAFT_VOTER: AclOperation.CLUSTER_ACTION,
}
_REFUSED = ErrorCode.cluster_authorization_failed


def _refusal(api_key: int, ctx: RequestContext) -> Any:
    """The api's error response (Kafka's getErrorResponse): the top-level error, nothing else."""
    if api_key == _UPDATE_RAFT_VOTER:
        return update_voter_response(error=_REFUSED, leader_id=None, epoch=-1, endpoints=(), listener="")
    return make_entity(ctx.response_class, throttle_time=timedelta(0), error_code=_REFUSED,
                       error_message="Cluster authorization failed.", topics=(), responses=(), nodes=())


def _authorized(api_key: int, handler: Handler, authorizer: NodeAuthorizer) -> Handler:
    operation = RAFT_API_OPERATIONS[api_key]

    async def serve(request: Any, ctx: RequestContext) -> Any:
        if not authorizer.authorize_cluster(ctx, operation):
            return _refusal(api_key, ctx)
        return await handler(request, ctx)

    return serve


def _module(cls: type[Any]) -> Any:
    return sys.modules[cls.__module__]


def _topics(request: Any, schema: Any, convert: Callable[[Any], Any]) -> tuple[Any, ...]:
    """The request's topics in the served schema, each partition passed through `convert`."""
    return tuple(
        schema.TopicData(topic_name=topic.topic_name, partitions=tuple(convert(p) for p in topic.partitions))
        for topic in request.topics
    )


def _vote_with_pre_vote(request: Any, served: type[Any]) -> Any:
    schema = _module(served)
    topics = _topics(
        request,
        schema,
        lambda p: schema.PartitionData(
            partition_index=p.partition_index,
            replica_epoch=p.replica_epoch,
            replica_id=p.replica_id,
            replica_directory_id=getattr(p, "replica_directory_id", None),
            voter_directory_id=getattr(p, "voter_directory_id", None),
            last_offset_epoch=p.last_offset_epoch,
            last_offset=p.last_offset,
            pre_vote=False,
        ),
    )
    if hasattr(request, "voter_id"):
        return served(cluster_id=request.cluster_id, voter_id=request.voter_id, topics=topics)
    return served(cluster_id=request.cluster_id, topics=topics)


def _begin_quorum_epoch_v0(request: Any, served: type[Any]) -> Any:
    schema = _module(served)
    topics = _topics(
        request,
        schema,
        lambda p: schema.PartitionData(
            partition_index=p.partition_index,
            voter_directory_id=None,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
        ),
    )
    return served(cluster_id=request.cluster_id, topics=topics, leader_endpoints=())


def _end_quorum_epoch_v0(request: Any, served: type[Any]) -> Any:
    schema = _module(served)
    topics = _topics(
        request,
        schema,
        lambda p: schema.PartitionData(
            partition_index=p.partition_index,
            leader_id=p.leader_id,
            leader_epoch=p.leader_epoch,
            preferred_candidates=tuple(
                schema.ReplicaInfo(candidate_id=BrokerId(successor), candidate_directory_id=None)
                for successor in p.preferred_successors
            ),
        ),
    )
    return served(cluster_id=request.cluster_id, topics=topics, leader_endpoints=())


def _fetch_with_replica_state(request: Any, served: type[Any]) -> Any:
    upgraded = bridge(request, served)
    replica_state = _module(served).ReplicaState(replica_id=request.replica_id, replica_epoch=i64(-1))
    return dataclasses.replace(upgraded, replica_state=replica_state)


def _fetch_by_topic_name(request: Any, served: type[Any]) -> Any:
    upgraded = _fetch_with_replica_state(request, served)
    schema = _module(served)
    topics = tuple(
        schema.FetchTopic(
            topic_id=METADATA_TOPIC_ID if topic.topic == METADATA_TOPIC else ZERO_UUID,
            partitions=tuple(bridge(p, schema.FetchPartition) for p in topic.partitions),
        )
        for topic in request.topics
    )
    return dataclasses.replace(upgraded, topics=topics)


def _fetch_response_by_topic_name(response: Any, asked: type[Any]) -> Any:
    schema = _module(asked)
    downgraded = bridge(dataclasses.replace(response, responses=()), asked)
    responses = tuple(
        schema.FetchableTopicResponse(
            topic=METADATA_TOPIC,
            partitions=tuple(bridge(p, schema.PartitionData) for p in topic.partitions),
        )
        for topic in response.responses
        if topic.topic_id == METADATA_TOPIC_ID  # the core answers nothing else
    )
    return dataclasses.replace(downgraded, responses=responses)


_UPGRADES: Final[Mapping[int, Mapping[int, Upgrade]]] = {
    _VOTE: {0: _vote_with_pre_vote, 1: _vote_with_pre_vote},
    _BEGIN_QUORUM_EPOCH: {0: _begin_quorum_epoch_v0},
    _END_QUORUM_EPOCH: {0: _end_quorum_epoch_v0},
    _FETCH: {
        **dict.fromkeys(range(4, 13), _fetch_by_topic_name),
        13: _fetch_with_replica_state,
        14: _fetch_with_replica_state,
    },
}
_DOWNGRADES: Final[Mapping[int, Mapping[int, Downgrade]]] = {
    _FETCH: dict.fromkeys(range(4, 13), _fetch_response_by_topic_name),
}


def register_raft_apis(listener: Listener, *, served_requests: Mapping[int, int], handler: Handler,
                       authorizer: NodeAuthorizer) -> None:
    """Register `handler` (written for the core's versions, `served_requests`) for every raft api
    at its `RAFT_API_VERSIONS` range, behind the operation `RAFT_API_OPERATIONS` names."""
    for api_key, version in sorted(served_requests.items()):
        low, high = RAFT_API_VERSIONS.get(api_key, (version, version))
        listener.register(api_key, min_version=low, max_version=high, handler=bridged_handler(
            api_key, served_version=version, versions=(low, high), handler=_authorized(api_key, handler, authorizer),
            upgrades=_UPGRADES.get(api_key),
            downgrades=_DOWNGRADES.get(api_key),
        ))
