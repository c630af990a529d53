"""KIP-853 on the leader and on the replicas that ask for changes: AddRaftVoter, RemoveRaftVoter,
UpdateRaftVoter, a follower's automatic UpdateRaftVoter and an observer's auto-join, the
kraft.version 0 -> 1 upgrade, and DescribeQuorum (how tools read the membership).

Kafka's AddVoterHandler, RemoveVoterHandler and UpdateVoterHandler: one change at a time, gated
on the previous one having committed; the new voter set takes effect when appended and the
change is answered when it commits (a removed leader then resigns and hands over).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.add_raft_voter.v1 import request as add_voter_req
from kio.schema.add_raft_voter.v1 import response as add_voter_resp
from kio.schema.api_versions.v3 import response as api_versions_resp
from kio.schema.describe_quorum.v2 import request as describe_req
from kio.schema.describe_quorum.v2 import response as describe
from kio.schema.errors import ErrorCode
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.remove_raft_voter.v0 import request as remove_voter_req
from kio.schema.remove_raft_voter.v0 import response as remove_voter_resp
from kio.schema.types import BrokerId
from kio.schema.update_raft_voter.v0 import request as update_voter_req
from kio.schema.update_raft_voter.v0 import response as update_voter_resp
from kio.static.primitive import i16, i32, i64

from kraft_engine.invariant import require
from kraft_engine.raft import messages
from kraft_engine.raft.errors import KRaftVersionUpgradeError, NotLeaderError
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.output import RequestFailure
from kraft_engine.raft.quorum_state import FollowerState
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.raft.request_manager import NEVER, Inflight
from kraft_engine.raft.voter_set import KRAFT_VERSION_1, Endpoint, ReplicaKey, VoterNode, VoterSet

__all__ = ["VoterChanges"]

_MembershipRequest = (
    update_voter_req.UpdateRaftVoterRequest | add_voter_req.AddRaftVoterRequest | remove_voter_req.RemoveRaftVoterRequest
)
_MembershipResponse = (
    update_voter_resp.UpdateRaftVoterResponse | add_voter_resp.AddRaftVoterResponse | remove_voter_resp.RemoveRaftVoterResponse
)


@dataclass(slots=True)
class _VoterChange:
    """The one voter change a leader works on at a time."""

    kind: str
    token: int
    key: ReplicaKey
    endpoints: tuple[Endpoint, ...]
    deadline_ms: int
    epoch: int
    api_versions_token: int | None = None
    record_offset: int | None = None


class VoterChanges:
    """The leader's voter change in progress, and a replica's own membership requests."""

    def __init__(self, ctx: RaftContext, *, drain: Callable[[LeaderState, int], None]) -> None:
        self._ctx = ctx
        self._drain = drain
        self._change: _VoterChange | None = None
        # What voters told a kraft.version 0 leader through UpdateRaftVoter (directory id and
        # supported versions): what the 0 -> 1 upgrade checks.
        self._learned_voters: dict[int, VoterNode] = {}

    def on_leader_start(self) -> None:
        self._learned_voters = {}

    # ==========================================================================================
    # Leader side
    # ==========================================================================================
    def _gate(self, state: LeaderState) -> ErrorCode | None:
        """The gates every voter change passes first, in Kafka's order."""
        ctx = self._ctx
        if self._change is not None or state.high_watermark is None:
            return ErrorCode.request_timed_out
        if ctx.kraft_version < KRAFT_VERSION_1:
            return ErrorCode.unsupported_version
        latest = ctx.history.latest_voter_set_offset()
        if latest is not None and latest >= state.high_watermark:
            return ErrorCode.request_timed_out  # the previous change has not committed yet
        return None

    def handle_add_voter_request(
        self, request: add_voter_req.AddRaftVoterRequest, token: int, now_ms: int
    ) -> add_voter_resp.AddRaftVoterResponse | None:
        ctx = self._ctx
        if not ctx.check_cluster_id(request.cluster_id):
            return messages.add_voter_response(ErrorCode.inconsistent_cluster_id)
        state = ctx.quorum.state
        if not isinstance(state, LeaderState) or ctx.shutdown is not None:
            return messages.add_voter_response(ErrorCode.not_leader_or_follower)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        endpoints = tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.listeners)
        if key.id < 0 or key.directory_id is None or not endpoints:
            return messages.add_voter_response(ErrorCode.invalid_request, "a voter needs an id, a directory id and listeners")
        error = self._gate(state)
        if error is not None:
            return messages.add_voter_response(error)
        if key.id in ctx.voters.ids:
            return messages.add_voter_response(ErrorCode.duplicate_voter, f"voter id {key.id} is already a voter")
        timeout_ms = max(int(request.timeout.total_seconds() * 1000), 0) or ctx.config.request_timeout_ms
        change = _VoterChange(
            kind="add", token=token, key=key, endpoints=endpoints, deadline_ms=now_ms + timeout_ms, epoch=state.epoch
        )
        # Learn which kraft.version range the new voter supports before trusting it with a vote.
        change.api_versions_token = ctx.requests.send_unconditionally(key.id, endpoints, messages.api_versions_request(), now_ms)
        self._change = change
        return None

    def handle_api_versions_response(
        self, inflight: Inflight, response: api_versions_resp.ApiVersionsResponse, now_ms: int
    ) -> bool:
        ctx = self._ctx
        change = self._change
        state = ctx.quorum.state
        if change is None or change.api_versions_token != inflight.token or not isinstance(state, LeaderState):
            return True
        change.api_versions_token = None
        if response.error_code != ErrorCode.none:
            self.finish(ErrorCode.request_timed_out, "ApiVersions to the new voter failed")
            return False
        feature = next((f for f in response.supported_features if f.name == "kraft.version"), None)
        finalized = ctx.kraft_version
        if feature is None or not int(feature.min_version) <= finalized <= int(feature.max_version):
            self.finish(ErrorCode.invalid_request, f"the new voter does not support kraft.version {finalized}")
            return True
        if not state.is_replica_caught_up(change.key, now_ms=now_ms):
            self.finish(ErrorCode.request_timed_out, f"replica {change.key} is not caught up to the leader")
            return True
        voter = VoterNode(
            key=change.key,
            endpoints=change.endpoints,
            min_kraft_version=int(feature.min_version),
            max_kraft_version=int(feature.max_version),
        )
        self._append_voters(state, ctx.voters.with_voter(voter), change, now_ms)
        return True

    def handle_remove_voter_request(
        self, request: remove_voter_req.RemoveRaftVoterRequest, token: int, now_ms: int
    ) -> remove_voter_resp.RemoveRaftVoterResponse | None:
        ctx = self._ctx
        if not ctx.check_cluster_id(request.cluster_id):
            return messages.remove_voter_response(ErrorCode.inconsistent_cluster_id)
        state = ctx.quorum.state
        if not isinstance(state, LeaderState) or ctx.shutdown is not None:
            return messages.remove_voter_response(ErrorCode.not_leader_or_follower)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        error = self._gate(state)
        if error is not None:
            return messages.remove_voter_response(error)
        voters = ctx.voters
        voter = voters.get(key.id)
        if voter is None or voter.key != key:
            return messages.remove_voter_response(ErrorCode.voter_not_found, f"{key} is not a voter")
        if len(voters) == 1:
            return messages.remove_voter_response(ErrorCode.invalid_request, "cannot remove the last voter")
        change = _VoterChange(kind="remove", token=token, key=key, endpoints=(), deadline_ms=NEVER, epoch=state.epoch)
        self._change = change
        self._append_voters(state, voters.without_voter(key), change, now_ms)
        return None

    def _update_voter_reply(self, error: ErrorCode) -> update_voter_resp.UpdateRaftVoterResponse:
        ctx = self._ctx
        return messages.update_voter_response(
            error=error, leader_id=ctx.leader_id, epoch=ctx.epoch, endpoints=ctx.leader_endpoints(),
            listener=ctx.config.controller_listener_name,
        )

    def handle_update_voter_request(
        self, request: update_voter_req.UpdateRaftVoterRequest, token: int, now_ms: int
    ) -> update_voter_resp.UpdateRaftVoterResponse | None:
        ctx = self._ctx
        reply = self._update_voter_reply
        if not ctx.check_cluster_id(request.cluster_id):
            return reply(ErrorCode.inconsistent_cluster_id)
        error = ctx.validate_leader_only(int(request.current_leader_epoch))
        state = ctx.quorum.state
        if error is not None or not isinstance(state, LeaderState):
            return reply(error or ErrorCode.not_leader_or_follower)
        key = ReplicaKey.of(int(request.voter_id), request.voter_directory_id)
        endpoints = tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.listeners)
        feature = request.k_raft_version_feature
        low, high = int(feature.min_supported_version), int(feature.max_supported_version)
        if key.directory_id is None or not endpoints or low > high:
            return reply(ErrorCode.invalid_request)
        if self._change is not None or state.high_watermark is None:
            return reply(ErrorCode.request_timed_out)
        voters = ctx.voters
        current = voters.get(key.id)
        if current is None or not voters.is_voter(key):
            return reply(ErrorCode.voter_not_found)
        updated = VoterNode(key=key, endpoints=endpoints, min_kraft_version=low, max_kraft_version=high)
        if ctx.kraft_version < KRAFT_VERSION_1:
            # Static quorum: nothing to write, but remember what the voter told us, which is what
            # the kraft.version 0 -> 1 upgrade checks (directory id and supported versions).
            self._learned_voters[key.id] = updated
            return reply(ErrorCode.none)
        if not low <= ctx.kraft_version <= high:
            return reply(ErrorCode.invalid_request)
        latest = ctx.history.latest_voter_set_offset()
        if latest is not None and latest >= state.high_watermark:
            return reply(ErrorCode.request_timed_out)
        if current == updated:
            return reply(ErrorCode.none)
        change = _VoterChange(kind="update", token=token, key=key, endpoints=endpoints, deadline_ms=NEVER, epoch=state.epoch)
        self._change = change
        self._append_voters(state, voters.with_updated_voter(updated), change, now_ms)
        return None

    def _append_voters(self, state: LeaderState, voters: VoterSet, change: _VoterChange, now_ms: int) -> None:
        """Append the new voter set; it takes effect now and the change is answered on commit."""
        change.record_offset = state.accumulator.append_control([voters.to_record()], now_ms=now_ms)
        self._drain(state, now_ms)
        self.maybe_complete(now_ms)

    def maybe_complete(self, now_ms: int) -> None:
        """Answer the change once its VotersRecord committed (a removed leader then resigns)."""
        ctx = self._ctx
        change = self._change
        state = ctx.quorum.state
        if change is None or change.record_offset is None or not isinstance(state, LeaderState):
            return
        hwm = state.high_watermark
        if hwm is not None and hwm > change.record_offset:
            self.finish(ErrorCode.none, None)
            if change.kind == "remove" and not ctx.voters.is_voter(ctx.local_key):
                # A leader that removed itself steps down once the removal is committed.
                state.resign_requested = True

    def finish(self, error: ErrorCode, message: str | None) -> None:
        """Answer the change in progress (if any) with `error`."""
        change = self._change
        if change is None:
            return
        self._change = None
        ctx = self._ctx
        if change.kind == "add":
            ctx.respond(change.token, messages.add_voter_response(error, message))
        elif change.kind == "remove":
            ctx.respond(change.token, messages.remove_voter_response(error, message))
        else:
            ctx.respond(change.token, self._update_voter_reply(error))

    def on_failure(self, inflight: Inflight, failure: RequestFailure) -> None:
        change = self._change
        if change is not None and change.api_versions_token == inflight.token:
            change.api_versions_token = None
            self.finish(ErrorCode.request_timed_out, f"the new voter did not answer ApiVersions: {failure.value}")

    def poll(self, now_ms: int) -> None:
        change = self._change
        if change is not None:
            if change.epoch != self._ctx.epoch or not isinstance(self._ctx.quorum.state, LeaderState):
                self.finish(ErrorCode.not_leader_or_follower, "leadership changed")
            elif now_ms >= change.deadline_ms and change.record_offset is None:
                self.finish(ErrorCode.request_timed_out, "timed out")
            else:
                self.maybe_complete(now_ms)

    def deadlines(self, now_ms: int) -> list[int]:
        deadlines = []
        if self._change is not None and self._change.record_offset is None:
            # Once the VotersRecord is written the change ends with its commit (the high watermark
            # wakes us) or with the leadership; its deadline no longer applies (`poll`), and asking
            # to be polled at it again would spin.
            deadlines.append(self._change.deadline_ms)
        state = self._ctx.quorum.state
        if isinstance(state, FollowerState) and self._wants_membership_request(state):
            deadlines.append(max(state.update_voter_deadline_ms, self._ctx.requests.ready_at(now_ms, state.leader_id)))
        return deadlines

    def upgrade_kraft_version(self, epoch: int, version: int, *, validate_only: bool, now_ms: int) -> None:
        """See `RaftNode.upgrade_kraft_version`."""
        ctx = self._ctx
        state = ctx.quorum.state
        if not isinstance(state, LeaderState) or state.epoch != epoch:
            raise NotLeaderError(
                f"node {ctx.node_id} is not the leader of epoch {epoch}", leader_id=ctx.leader_id, epoch=ctx.epoch
            )
        current = ctx.kraft_version
        if version == current:
            return
        if version < current:
            raise KRaftVersionUpgradeError(f"kraft.version cannot be downgraded from {current} to {version}")
        if version != KRAFT_VERSION_1:
            raise KRaftVersionUpgradeError(f"kraft.version {version} is not supported")
        if self._change is not None or state.high_watermark is None:
            raise KRaftVersionUpgradeError("a voter change is in progress; retry")
        low, high = ctx.supported_kraft_versions
        upgraded = []
        for voter in ctx.voters:
            if voter.key.id == ctx.node_id:
                learned: VoterNode | None = VoterNode(
                    key=ctx.local_key, endpoints=ctx.local_endpoints or voter.endpoints,
                    min_kraft_version=low, max_kraft_version=high,
                )
            else:
                learned = self._learned_voters.get(voter.key.id)
            if learned is None or learned.key.directory_id is None:
                raise KRaftVersionUpgradeError(f"voter {voter.key.id} has no known directory id")
            if not learned.supports_kraft_version(version):
                raise KRaftVersionUpgradeError(f"voter {voter.key.id} does not support kraft.version {version}")
            upgraded.append(learned)
        if validate_only:
            return
        state.accumulator.append_control(
            [KRaftVersionRecord(version=i16(0), k_raft_version=i16(version)), VoterSet(upgraded).to_record()], now_ms=now_ms
        )
        self._drain(state, now_ms)

    # ==========================================================================================
    # Follower / observer side: UpdateRaftVoter and auto-join
    # ==========================================================================================
    def maybe_send_membership_request(self, state: FollowerState, now_ms: int) -> bool:
        """Between two Fetches the connection is free for a membership request (Kafka sends
        UpdateRaftVoter / auto-join requests instead of the next Fetch when one is due)."""
        ctx = self._ctx
        if now_ms < state.update_voter_deadline_ms or not ctx.requests.is_ready(state.leader_id, now_ms):
            return False
        request = self._membership_request(state)
        if request is None or ctx.requests.send(state.leader_id, state.leader_endpoints, request, now_ms) is None:
            return False
        state.update_voter_deadline_ms = now_ms + ctx.config.fetch_timeout_ms
        return True

    def _wants_membership_request(self, state: FollowerState) -> bool:
        return (
            state.has_fetched_from_leader
            and state.update_voter_deadline_ms < NEVER
            and self._membership_request(state) is not None
        )

    def _membership_request(self, state: FollowerState) -> _MembershipRequest | None:
        """UpdateRaftVoter for a voter whose recorded endpoints/versions drifted; AddRaftVoter
        (or RemoveRaftVoter of a stale same-id entry) for an auto-joining observer."""
        ctx = self._ctx
        if not state.has_fetched_from_leader or not ctx.local_endpoints:
            return None
        voters = ctx.voters
        low, high = ctx.supported_kraft_versions
        if voters.is_voter(ctx.local_key):
            recorded = voters.get(ctx.node_id)
            require(recorded is not None, "a voter has a voter-set entry")
            assert recorded is not None  # for mypy; require() above is the real check
            drifted = (
                recorded.endpoints != ctx.local_endpoints
                or (recorded.min_kraft_version, recorded.max_kraft_version) != (low, high)
                or recorded.key.directory_id is None
            )
            if not drifted or ctx.local_key.directory_id is None:
                state.update_voter_deadline_ms = NEVER
                return None
            return messages.update_voter_request(
                cluster_id=ctx.cluster_id, epoch=state.epoch, voter=ctx.local_key, endpoints=ctx.local_endpoints,
                min_kraft_version=low, max_kraft_version=high,
            )
        if not ctx.config.auto_join_enable or ctx.local_key.directory_id is None:
            state.update_voter_deadline_ms = NEVER
            return None
        if ctx.kraft_version < KRAFT_VERSION_1:
            return None
        stale = voters.get(ctx.node_id)
        if stale is not None:
            # Our id is a voter with another directory (we were re-formatted): remove that entry first.
            return messages.remove_voter_request(cluster_id=ctx.cluster_id, voter=stale.key)
        return messages.add_voter_request(
            cluster_id=ctx.cluster_id, voter=ctx.local_key, endpoints=ctx.local_endpoints,
            timeout_ms=ctx.config.request_timeout_ms,
        )

    def handle_membership_response(self, inflight: Inflight, response: _MembershipResponse, now_ms: int) -> bool:
        state = self._ctx.quorum.state
        if response.error_code == ErrorCode.none and isinstance(state, FollowerState) and isinstance(
            inflight.request, update_voter_req.UpdateRaftVoterRequest
        ):
            state.update_voter_deadline_ms = NEVER
        return bool(response.error_code == ErrorCode.none)

    # ==========================================================================================
    # DescribeQuorum
    # ==========================================================================================
    def handle_describe_quorum_request(
        self, request: describe_req.DescribeQuorumRequest, token: int, now_ms: int
    ) -> describe.DescribeQuorumResponse:
        ctx = self._ctx
        partition = messages.single_partition(request.topics, topic_field="topic_name", partition_field="partition_index")
        if partition is None:
            return messages.describe_quorum_error(ErrorCode.invalid_request, "expected one partition of __cluster_metadata")
        state = ctx.quorum.state

        def wrap(partition_data: describe.PartitionData, nodes: tuple[describe.Node, ...]) -> describe.DescribeQuorumResponse:
            return describe.DescribeQuorumResponse(
                error_code=ErrorCode.none,
                error_message=None,
                topics=(describe.TopicData(topic_name=messages.METADATA_TOPIC, partitions=(partition_data,)),),
                nodes=nodes,
            )

        if not isinstance(state, LeaderState):
            return wrap(
                describe.PartitionData(
                    partition_index=i32(messages.METADATA_PARTITION),
                    error_code=ErrorCode.not_leader_or_follower,
                    error_message=ErrorCode.not_leader_or_follower.name,
                    leader_id=BrokerId(-1 if ctx.leader_id is None else ctx.leader_id),
                    leader_epoch=i32(ctx.epoch),
                    high_watermark=i64(-1),
                    current_voters=(),
                    observers=(),
                ),
                (),
            )
        end = ctx.log.end_offset().offset

        def replica(key: ReplicaKey, log_end: int | None, fetch_ms: int, caught_up_ms: int) -> describe.ReplicaState:
            return describe.ReplicaState(
                replica_id=BrokerId(key.id),
                replica_directory_id=messages.wire_directory(key.directory_id),
                log_end_offset=i64(-1 if log_end is None else log_end),
                last_fetch_timestamp=i64(fetch_ms),
                last_caught_up_timestamp=i64(caught_up_ms),
            )

        voters = []
        for voter_id, rs in sorted(state.voter_states.items()):
            if voter_id == ctx.node_id:
                voters.append(replica(rs.key, end, now_ms, now_ms))
            else:
                voters.append(replica(rs.key, rs.end_offset, rs.last_fetch_timestamp_ms, rs.last_caught_up_timestamp_ms))
        observers = [
            replica(key, rs.end_offset, rs.last_fetch_timestamp_ms, rs.last_caught_up_timestamp_ms)
            for key, rs in sorted(state.observer_states.items(), key=lambda item: item[0].id)
        ]
        nodes = tuple(
            describe.Node(
                node_id=BrokerId(v.key.id),
                listeners=tuple(describe.Listener(name=e.name, host=e.host, port=e.port) for e in v.endpoints),  # type: ignore[arg-type]
            )
            for v in ctx.voters
        )
        return wrap(
            describe.PartitionData(
                partition_index=i32(messages.METADATA_PARTITION),
                error_code=ErrorCode.none,
                error_message=None,
                leader_id=BrokerId(ctx.node_id),
                leader_epoch=i32(state.epoch),
                high_watermark=i64(-1 if state.high_watermark is None else state.high_watermark),
                current_voters=tuple(voters),
                observers=tuple(observers),
            ),
            nodes,
        )
