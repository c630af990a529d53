"""The KRaft RPCs as kio entities at the wire versions a Kafka 4.x controller speaks.

Vote v2, BeginQuorumEpoch v1, EndQuorumEpoch v1, Fetch v18 (KIP-1166: the follower reports its high watermark), FetchSnapshot v1, DescribeQuorum v2,
AddRaftVoter v1, RemoveRaftVoter v0, UpdateRaftVoter v0 and ApiVersions v3 (the node process speaks the newest ApiVersions on the
wire, since v0-v3 omit features whose minimum version is 0, and hands back the v3 fields). Building them in one
place keeps the single-partition framing (`__cluster_metadata`-0, topic id AAAAAAAAAAAAAAAAAAAAAQ)
and the leader-endpoint plumbing out of the consensus logic.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Sequence
from typing import Any, Final, Protocol, TypeAlias, TypeVar

from kio.schema.add_raft_voter.v1 import request as add_voter_req
from kio.schema.add_raft_voter.v1 import response as add_voter_resp
from kio.schema.api_versions.v3 import request as api_versions_req
from kio.schema.api_versions.v3 import response as api_versions_resp
from kio.schema.begin_quorum_epoch.v1 import request as begin_req
from kio.schema.begin_quorum_epoch.v1 import response as begin_resp
from kio.schema.describe_quorum.v2 import request as describe_req
from kio.schema.describe_quorum.v2 import response as describe_resp
from kio.schema.end_quorum_epoch.v1 import request as end_req
from kio.schema.end_quorum_epoch.v1 import response as end_resp
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v18 import request as fetch_req
from kio.schema.fetch.v18 import response as fetch_resp
from kio.schema.fetch_snapshot.v1 import request as snap_req
from kio.schema.fetch_snapshot.v1 import response as snap_resp
from kio.schema.remove_raft_voter.v0 import request as remove_voter_req
from kio.schema.remove_raft_voter.v0 import response as remove_voter_resp
from kio.schema.types import BrokerId, TopicName
from kio.schema.update_raft_voter.v0 import request as update_voter_req
from kio.schema.update_raft_voter.v0 import response as update_voter_resp
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp
from kio.static.primitive import Records, i16, i32, i32Timedelta, i64, u16

from kraft_engine.kafka_uuid import ONE_UUID, ZERO_UUID
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey
from kraft_engine.records.log_batch import OffsetAndEpoch

__all__ = [
    "METADATA_PARTITION",
    "METADATA_TOPIC",
    "METADATA_TOPIC_ID",
    "SERVED_REQUESTS",
    "RaftRequest",
    "RaftResponse",
    "SentRequest",
    "SentResponse",
]

METADATA_TOPIC: Final = TopicName("__cluster_metadata")
METADATA_PARTITION: Final = 0
METADATA_TOPIC_ID: Final = ONE_UUID

_ZERO_DELTA: Final = i32Timedelta.parse(datetime.timedelta(0))

# The wire boundary of the core, typed: what `RaftNode.handle_request` accepts and answers, and
# what it sends (the raft requests plus the ApiVersions it asks a joining voter) and gets back.
RaftRequest: TypeAlias = (
    vote_req.VoteRequest
    | begin_req.BeginQuorumEpochRequest
    | end_req.EndQuorumEpochRequest
    | fetch_req.FetchRequest
    | snap_req.FetchSnapshotRequest
    | describe_req.DescribeQuorumRequest
    | add_voter_req.AddRaftVoterRequest
    | remove_voter_req.RemoveRaftVoterRequest
    | update_voter_req.UpdateRaftVoterRequest
)
RaftResponse: TypeAlias = (
    vote_resp.VoteResponse
    | begin_resp.BeginQuorumEpochResponse
    | end_resp.EndQuorumEpochResponse
    | fetch_resp.FetchResponse
    | snap_resp.FetchSnapshotResponse
    | describe_resp.DescribeQuorumResponse
    | add_voter_resp.AddRaftVoterResponse
    | remove_voter_resp.RemoveRaftVoterResponse
    | update_voter_resp.UpdateRaftVoterResponse
)
SentRequest: TypeAlias = RaftRequest | api_versions_req.ApiVersionsRequest
SentResponse: TypeAlias = RaftResponse | api_versions_resp.ApiVersionsResponse

_P_co = TypeVar("_P_co", covariant=True)
_P = TypeVar("_P")


class _Topic(Protocol[_P_co]):
    @property
    def partitions(self) -> tuple[_P_co, ...]: ...


def single_partition(topics: Sequence[_Topic[_P]], *, topic_field: str, partition_field: str) -> _P | None:
    """The one `__cluster_metadata`-0 partition of a request/response, or None if it is not that
    (each api names its topic and partition fields differently)."""
    if len(topics) != 1 or getattr(topics[0], topic_field) != METADATA_TOPIC:
        return None
    partitions = topics[0].partitions
    if len(partitions) != 1 or int(getattr(partitions[0], partition_field)) != METADATA_PARTITION:
        return None
    return partitions[0]


def optional_id(value: int) -> int | None:
    """A wire id where -1 (any negative) means none."""
    return None if int(value) < 0 else int(value)


class _NodeEndpoint(Protocol):
    @property
    def node_id(self) -> int: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...


def response_endpoints(nodes: Sequence[_NodeEndpoint], leader_id: int | None, listener: str) -> tuple[Endpoint, ...]:
    """Leader endpoints from a response's node_endpoints (they belong to the listener we used)."""
    if leader_id is None:
        return ()
    return tuple(Endpoint(listener, n.host, int(n.port)) for n in nodes if int(n.node_id) == leader_id)

# The requests a RaftNode answers, as {api key: the one version it speaks}: what the node
# process registers on its controller listener (and advertises in ApiVersions).
SERVED_REQUESTS: Final[dict[int, int]] = {
    1: 18,  # Fetch
    52: 2,  # Vote
    53: 1,  # BeginQuorumEpoch
    54: 1,  # EndQuorumEpoch
    55: 2,  # DescribeQuorum
    59: 1,  # FetchSnapshot
    80: 1,  # AddRaftVoter
    81: 0,  # RemoveRaftVoter
    82: 0,  # UpdateRaftVoter
}


def wire_directory(directory_id: uuid.UUID | None) -> uuid.UUID:
    return ZERO_UUID if directory_id is None else directory_id


def _millis(value: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value))


def _leader_hint(endpoints: tuple[Endpoint, ...], leader_id: int | None, listener: str) -> tuple[int, str, int] | None:
    if leader_id is None or not endpoints:
        return None
    chosen = next((e for e in endpoints if e.name == listener), endpoints[0])
    return leader_id, chosen.host, chosen.port


# -- Vote ------------------------------------------------------------------------------------------
def vote_request(
    *, cluster_id: str, voter: ReplicaKey, replica: ReplicaKey, epoch: int, last: OffsetAndEpoch, pre_vote: bool
) -> vote_req.VoteRequest:
    return vote_req.VoteRequest(
        cluster_id=cluster_id,
        voter_id=BrokerId(voter.id),
        topics=(
            vote_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    vote_req.PartitionData(
                        partition_index=i32(METADATA_PARTITION),
                        replica_epoch=i32(epoch),
                        replica_id=BrokerId(replica.id),
                        replica_directory_id=wire_directory(replica.directory_id),
                        voter_directory_id=wire_directory(voter.directory_id),
                        last_offset_epoch=i32(last.epoch),
                        last_offset=i64(last.offset),
                        pre_vote=pre_vote,
                    ),
                ),
            ),
        ),
    )


def _epoch_response(
    module: Any,
    response_type: Any,
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode,
    **partition_fields: Any,
) -> Any:
    """Vote, BeginQuorumEpoch and EndQuorumEpoch responses share one shape: a top-level error,
    one partition with (error, leader id, leader epoch), and the leader's endpoint."""
    hint = _leader_hint(endpoints, leader_id, listener)
    return response_type(
        error_code=top_level_error,
        topics=()
        if top_level_error != ErrorCode.none
        else (
            module.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    module.PartitionData(
                        partition_index=i32(METADATA_PARTITION),
                        error_code=error,
                        leader_id=BrokerId(-1 if leader_id is None else leader_id),
                        leader_epoch=i32(epoch),
                        **partition_fields,
                    ),
                ),
            ),
        ),
        node_endpoints=()
        if hint is None
        else (module.NodeEndpoint(node_id=BrokerId(hint[0]), host=hint[1], port=u16(hint[2])),),
    )


def vote_response(
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    granted: bool,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode = ErrorCode.none,
) -> vote_resp.VoteResponse:
    response: vote_resp.VoteResponse = _epoch_response(
        vote_resp, vote_resp.VoteResponse, error=error, leader_id=leader_id, epoch=epoch, endpoints=endpoints, listener=listener,
        top_level_error=top_level_error, vote_granted=granted,
    )
    return response


# -- BeginQuorumEpoch ------------------------------------------------------------------------------
def begin_quorum_epoch_request(
    *, cluster_id: str, voter: ReplicaKey, leader_id: int, epoch: int, leader_endpoints: tuple[Endpoint, ...]
) -> begin_req.BeginQuorumEpochRequest:
    return begin_req.BeginQuorumEpochRequest(
        cluster_id=cluster_id,
        voter_id=BrokerId(voter.id),
        topics=(
            begin_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    begin_req.PartitionData(
                        partition_index=i32(METADATA_PARTITION),
                        voter_directory_id=wire_directory(voter.directory_id),
                        leader_id=BrokerId(leader_id),
                        leader_epoch=i32(epoch),
                    ),
                ),
            ),
        ),
        leader_endpoints=tuple(
            begin_req.LeaderEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in leader_endpoints
        ),
    )


def begin_quorum_epoch_response(
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode = ErrorCode.none,
) -> begin_resp.BeginQuorumEpochResponse:
    response: begin_resp.BeginQuorumEpochResponse = _epoch_response(
        begin_resp, begin_resp.BeginQuorumEpochResponse, error=error, leader_id=leader_id, epoch=epoch, endpoints=endpoints, listener=listener,
        top_level_error=top_level_error,
    )
    return response


# -- EndQuorumEpoch --------------------------------------------------------------------------------
def end_quorum_epoch_request(
    *,
    cluster_id: str,
    leader_id: int,
    epoch: int,
    preferred: tuple[ReplicaKey, ...],
    leader_endpoints: tuple[Endpoint, ...],
) -> end_req.EndQuorumEpochRequest:
    return end_req.EndQuorumEpochRequest(
        cluster_id=cluster_id,
        topics=(
            end_req.TopicData(
                topic_name=METADATA_TOPIC,
                partitions=(
                    end_req.PartitionData(
                        partition_index=i32(METADATA_PARTITION),
                        leader_id=BrokerId(leader_id),
                        leader_epoch=i32(epoch),
                        preferred_candidates=tuple(
                            end_req.ReplicaInfo(
                                candidate_id=BrokerId(k.id), candidate_directory_id=wire_directory(k.directory_id)
                            )
                            for k in preferred
                        ),
                    ),
                ),
            ),
        ),
        leader_endpoints=tuple(end_req.LeaderEndpoint(name=e.name, host=e.host, port=u16(e.port)) for e in leader_endpoints),
    )


def end_quorum_epoch_response(
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode = ErrorCode.none,
) -> end_resp.EndQuorumEpochResponse:
    response: end_resp.EndQuorumEpochResponse = _epoch_response(
        end_resp, end_resp.EndQuorumEpochResponse, error=error, leader_id=leader_id, epoch=epoch, endpoints=endpoints, listener=listener,
        top_level_error=top_level_error,
    )
    return response


# -- Fetch -----------------------------------------------------------------------------------------
def fetch_request(
    *,
    cluster_id: str,
    replica: ReplicaKey,
    epoch: int,
    fetch_offset: int,
    last_fetched_epoch: int,
    high_watermark: int | None,
    max_wait_ms: int,
    max_bytes: int,
) -> fetch_req.FetchRequest:
    return fetch_req.FetchRequest(
        cluster_id=cluster_id,
        replica_state=fetch_req.ReplicaState(replica_id=BrokerId(replica.id), replica_epoch=i64(-1)),
        max_wait=_millis(max_wait_ms),
        min_bytes=i32(0),
        max_bytes=i32(max_bytes),
        topics=(
            fetch_req.FetchTopic(
                topic_id=METADATA_TOPIC_ID,
                partitions=(
                    fetch_req.FetchPartition(
                        partition=i32(METADATA_PARTITION),
                        current_leader_epoch=i32(epoch),
                        fetch_offset=i64(fetch_offset),
                        last_fetched_epoch=i32(last_fetched_epoch),
                        log_start_offset=i64(-1),
                        partition_max_bytes=i32(max_bytes),
                        replica_directory_id=replica.directory_id,
                        high_watermark=i64(-1 if high_watermark is None else high_watermark),
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )


def fetch_response(
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    high_watermark: int | None,
    log_start_offset: int,
    records: bytes,
    diverging: OffsetAndEpoch | None,
    snapshot_id: OffsetAndEpoch | None,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode = ErrorCode.none,
) -> fetch_resp.FetchResponse:
    hint = _leader_hint(endpoints, leader_id, listener)
    partition = fetch_resp.PartitionData(
        partition_index=i32(METADATA_PARTITION),
        error_code=error,
        high_watermark=i64(-1 if high_watermark is None else high_watermark),
        log_start_offset=i64(log_start_offset),
        diverging_epoch=fetch_resp.EpochEndOffset()
        if diverging is None
        else fetch_resp.EpochEndOffset(epoch=i32(diverging.epoch), end_offset=i64(diverging.offset)),
        current_leader=fetch_resp.LeaderIdAndEpoch(
            leader_id=BrokerId(-1 if leader_id is None else leader_id), leader_epoch=i32(epoch)
        ),
        snapshot_id=fetch_resp.SnapshotId()
        if snapshot_id is None
        else fetch_resp.SnapshotId(end_offset=i64(snapshot_id.offset), epoch=i32(snapshot_id.epoch)),
        aborted_transactions=None,
        records=Records(records),
    )
    return fetch_resp.FetchResponse(
        throttle_time=_ZERO_DELTA,
        error_code=top_level_error,
        responses=()
        if top_level_error != ErrorCode.none
        else (fetch_resp.FetchableTopicResponse(topic_id=METADATA_TOPIC_ID, partitions=(partition,)),),
        node_endpoints=()
        if hint is None
        else (fetch_resp.NodeEndpoint(node_id=BrokerId(hint[0]), host=hint[1], port=i32(hint[2])),),
    )


# -- FetchSnapshot ---------------------------------------------------------------------------------
def fetch_snapshot_request(
    *, cluster_id: str, replica: ReplicaKey, epoch: int, snapshot_id: OffsetAndEpoch, position: int, max_bytes: int
) -> snap_req.FetchSnapshotRequest:
    return snap_req.FetchSnapshotRequest(
        cluster_id=cluster_id,
        replica_id=BrokerId(replica.id),
        max_bytes=i32(max_bytes),
        topics=(
            snap_req.TopicSnapshot(
                name=METADATA_TOPIC,
                partitions=(
                    snap_req.PartitionSnapshot(
                        partition=i32(METADATA_PARTITION),
                        current_leader_epoch=i32(epoch),
                        snapshot_id=snap_req.SnapshotId(end_offset=i64(snapshot_id.offset), epoch=i32(snapshot_id.epoch)),
                        position=i64(position),
                        replica_directory_id=replica.directory_id,
                    ),
                ),
            ),
        ),
    )


def fetch_snapshot_response(
    *,
    error: ErrorCode,
    leader_id: int | None,
    epoch: int,
    snapshot_id: OffsetAndEpoch,
    size: int,
    position: int,
    data: bytes,
    endpoints: tuple[Endpoint, ...],
    listener: str,
    top_level_error: ErrorCode = ErrorCode.none,
) -> snap_resp.FetchSnapshotResponse:
    hint = _leader_hint(endpoints, leader_id, listener)
    return snap_resp.FetchSnapshotResponse(
        throttle_time=_ZERO_DELTA,
        error_code=top_level_error,
        topics=()
        if top_level_error != ErrorCode.none
        else (
            snap_resp.TopicSnapshot(
                name=METADATA_TOPIC,
                partitions=(
                    snap_resp.PartitionSnapshot(
                        index=i32(METADATA_PARTITION),
                        error_code=error,
                        snapshot_id=snap_resp.SnapshotId(end_offset=i64(snapshot_id.offset), epoch=i32(snapshot_id.epoch)),
                        current_leader=snap_resp.LeaderIdAndEpoch(
                            leader_id=BrokerId(-1 if leader_id is None else leader_id), leader_epoch=i32(epoch)
                        ),
                        size=i64(size),
                        position=i64(position),
                        unaligned_records=Records(data),
                    ),
                ),
            ),
        ),
        node_endpoints=()
        if hint is None
        else (snap_resp.NodeEndpoint(node_id=BrokerId(hint[0]), host=hint[1], port=u16(hint[2])),),
    )


# -- DescribeQuorum --------------------------------------------------------------------------------
def describe_quorum_request() -> describe_req.DescribeQuorumRequest:
    return describe_req.DescribeQuorumRequest(
        topics=(
            describe_req.TopicData(
                topic_name=METADATA_TOPIC, partitions=(describe_req.PartitionData(partition_index=i32(METADATA_PARTITION)),)
            ),
        )
    )


def describe_quorum_error(error: ErrorCode, message: str | None) -> describe_resp.DescribeQuorumResponse:
    return describe_resp.DescribeQuorumResponse(error_code=error, error_message=message, topics=(), nodes=())


# -- KIP-853 ---------------------------------------------------------------------------------------
def add_voter_response(error: ErrorCode, message: str | None = None) -> add_voter_resp.AddRaftVoterResponse:
    return add_voter_resp.AddRaftVoterResponse(throttle_time=_ZERO_DELTA, error_code=error, error_message=message)


def remove_voter_response(error: ErrorCode, message: str | None = None) -> remove_voter_resp.RemoveRaftVoterResponse:
    return remove_voter_resp.RemoveRaftVoterResponse(throttle_time=_ZERO_DELTA, error_code=error, error_message=message)


def update_voter_response(
    *, error: ErrorCode, leader_id: int | None, epoch: int, endpoints: tuple[Endpoint, ...], listener: str
) -> update_voter_resp.UpdateRaftVoterResponse:
    hint = _leader_hint(endpoints, leader_id, listener)
    return update_voter_resp.UpdateRaftVoterResponse(
        throttle_time=_ZERO_DELTA,
        error_code=error,
        current_leader=update_voter_resp.CurrentLeader(
            leader_id=BrokerId(-1 if leader_id is None else leader_id),
            leader_epoch=i32(epoch),
            host="" if hint is None else hint[1],
            port=i32(-1 if hint is None else hint[2]),
        ),
    )


def add_voter_request(
    *, cluster_id: str, voter: ReplicaKey, endpoints: tuple[Endpoint, ...], timeout_ms: int
) -> add_voter_req.AddRaftVoterRequest:
    return add_voter_req.AddRaftVoterRequest(
        cluster_id=cluster_id,
        timeout=_millis(timeout_ms),
        voter_id=i32(voter.id),
        voter_directory_id=wire_directory(voter.directory_id),
        listeners=tuple(add_voter_req.Listener(name=e.name, host=e.host, port=u16(e.port)) for e in endpoints),
        ack_when_committed=True,
    )


def remove_voter_request(*, cluster_id: str, voter: ReplicaKey) -> remove_voter_req.RemoveRaftVoterRequest:
    return remove_voter_req.RemoveRaftVoterRequest(
        cluster_id=cluster_id, voter_id=i32(voter.id), voter_directory_id=wire_directory(voter.directory_id)
    )


def update_voter_request(
    *,
    cluster_id: str,
    epoch: int,
    voter: ReplicaKey,
    endpoints: tuple[Endpoint, ...],
    min_kraft_version: int,
    max_kraft_version: int,
) -> update_voter_req.UpdateRaftVoterRequest:
    return update_voter_req.UpdateRaftVoterRequest(
        cluster_id=cluster_id,
        current_leader_epoch=i32(epoch),
        voter_id=i32(voter.id),
        voter_directory_id=wire_directory(voter.directory_id),
        listeners=tuple(update_voter_req.Listener(name=e.name, host=e.host, port=u16(e.port)) for e in endpoints),
        k_raft_version_feature=update_voter_req.KRaftVersionFeature(
            min_supported_version=i16(min_kraft_version), max_supported_version=i16(max_kraft_version)
        ),
    )


def api_versions_request() -> api_versions_req.ApiVersionsRequest:
    return api_versions_req.ApiVersionsRequest(client_software_name="kraftwerk", client_software_version="0.1.0")
