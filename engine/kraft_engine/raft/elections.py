"""Elections: pre-vote and vote (KIP-996), the candidacy's backoff, the leader's announcements
(BeginQuorumEpoch) and its hand-over (EndQuorumEpoch).

Kafka keeps these in KafkaRaftClient next to the QuorumState transitions they drive; here they
are one part of the node. Becoming leader itself (the epoch's first batch) belongs to the node,
which this part calls once a candidacy is granted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, TypeVar, overload

from kio.schema.begin_quorum_epoch.v1 import request as begin_req
from kio.schema.begin_quorum_epoch.v1 import response as begin_resp
from kio.schema.end_quorum_epoch.v1 import request as end_req
from kio.schema.end_quorum_epoch.v1 import response as end_resp
from kio.schema.errors import ErrorCode
from kio.schema.vote.v2 import request as vote_req
from kio.schema.vote.v2 import response as vote_resp

from kraft_engine.raft import messages
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.messages import SentRequest
from kraft_engine.raft.quorum_state import (
    CandidateState,
    FollowerState,
    ProspectiveState,
    ResignedState,
    UnattachedState,
)
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.raft.request_manager import Inflight
from kraft_engine.raft.transitions import EpochTransitions
from kraft_engine.raft.voter_set import Endpoint, ReplicaKey, VoterNode
from kraft_engine.records.log_batch import OffsetAndEpoch

__all__ = ["Elections"]

# Kafka's RETRY_BACKOFF_BASE_MS for the candidate's binary exponential election backoff.
_RETRY_BACKOFF_BASE_MS: Final = 100

_EpochResponse = vote_resp.VoteResponse | begin_resp.BeginQuorumEpochResponse | end_resp.EndQuorumEpochResponse
_EpochPartitionT = TypeVar("_EpochPartitionT", vote_resp.PartitionData, begin_resp.PartitionData, end_resp.PartitionData)


class Elections:
    """Prospective -> Candidate -> Leader, the votes this replica grants, and leader announcements."""

    def __init__(self, ctx: RaftContext, *, transitions: EpochTransitions, become_leader: Callable[[int], None]) -> None:
        self._ctx = ctx
        self._transitions = transitions
        self._become_leader = become_leader
        self._retries = 0

    def reset_retries(self) -> None:
        """A leader was found (or we became it): the next lost candidacy backs off from the start."""
        self._retries = 0

    # -- polling ---------------------------------------------------------------------------------
    def start_prospective(self, now_ms: int, *, pre_vote_delay_ms: int = 0) -> None:
        self._ctx.quorum.transition_to_prospective(now_ms=now_ms, pre_vote_delay_ms=pre_vote_delay_ms)
        self._ctx.requests.reset()
        self.maybe_advance(now_ms)

    def poll_prospective(self, state: ProspectiveState, now_ms: int) -> None:
        if now_ms >= state.election_deadline_ms:
            self._prospective_lost(state, now_ms)
            return
        if now_ms < state.pre_vote_start_ms:
            return
        self._send_vote_requests(state.election.unrecorded(), epoch=state.epoch, pre_vote=True, now_ms=now_ms)

    def _prospective_lost(self, state: ProspectiveState, now_ms: int) -> None:
        quorum = self._ctx.quorum
        if state.leader_id is not None and state.leader_endpoints:
            quorum.transition_to_follower(
                state.epoch, leader_id=state.leader_id, endpoints=state.leader_endpoints, now_ms=now_ms
            )
        else:
            quorum.transition_to_unattached(state.epoch, now_ms=now_ms)
        self._ctx.requests.reset()

    def poll_candidate(self, state: CandidateState, now_ms: int) -> None:
        if state.backoff_until_ms is not None:
            if now_ms >= state.backoff_until_ms:
                self.start_prospective(now_ms)
            return
        if now_ms >= state.election_deadline_ms:
            state.backoff_until_ms = now_ms + self._backoff_ms()
            return
        self._send_vote_requests(state.election.unrecorded(), epoch=state.epoch, pre_vote=False, now_ms=now_ms)

    def poll_resigned(self, state: ResignedState, now_ms: int) -> None:
        ctx = self._ctx
        if now_ms >= state.election_deadline_ms:
            ctx.quorum.transition_to_unattached(state.epoch + 1, now_ms=now_ms)
            ctx.requests.reset()
            return
        request = messages.end_quorum_epoch_request(
            cluster_id=ctx.cluster_id,
            leader_id=ctx.node_id,
            epoch=state.epoch,
            preferred=state.preferred_successors,
            leader_endpoints=ctx.local_endpoints,
        )
        self._send_to_voters(sorted(state.unacked_voters), lambda _: request, now_ms)

    def send_begin_quorum_epoch(self, state: LeaderState, now_ms: int) -> None:
        """Announce the leader to every voter that has not acknowledged it (each fetch timeout / 2)."""
        ctx = self._ctx
        if now_ms < state.begin_quorum_deadline_ms:
            return
        self._send_to_voters(
            state.non_acknowledging_voters(),
            lambda voter: messages.begin_quorum_epoch_request(
                cluster_id=ctx.cluster_id,
                voter=voter.key,
                leader_id=ctx.node_id,
                epoch=state.epoch,
                leader_endpoints=ctx.local_endpoints,
            ),
            now_ms,
        )
        state.begin_quorum_deadline_ms = now_ms + ctx.config.fetch_timeout_ms // 2

    def deadlines(self, now_ms: int) -> list[int]:
        """When the election in progress needs the node polled again."""
        ctx = self._ctx
        state = ctx.quorum.state
        requests = ctx.requests
        if isinstance(state, CandidateState):
            if state.backoff_until_ms is not None:
                return [state.backoff_until_ms]
            return [
                state.election_deadline_ms,
                *(requests.ready_at(now_ms, v) for v in state.election.unrecorded() if v != ctx.node_id),
            ]
        if isinstance(state, ProspectiveState):
            if now_ms < state.pre_vote_start_ms:
                return [state.election_deadline_ms, state.pre_vote_start_ms]
            return [
                state.election_deadline_ms,
                *(requests.ready_at(now_ms, v) for v in state.election.unrecorded() if v != ctx.node_id),
            ]
        if isinstance(state, ResignedState):
            return [state.election_deadline_ms, *(requests.ready_at(now_ms, v) for v in state.unacked_voters)]
        if isinstance(state, LeaderState) and state.non_acknowledging_voters():
            return [state.begin_quorum_deadline_ms]
        return []

    def _send_vote_requests(self, voter_ids: list[int], *, epoch: int, pre_vote: bool, now_ms: int) -> None:
        ctx = self._ctx
        last = ctx.log.end_offset()
        self._send_to_voters(
            [v for v in voter_ids if v != ctx.node_id],
            lambda voter: messages.vote_request(
                cluster_id=ctx.cluster_id, voter=voter.key, replica=ctx.local_key, epoch=epoch, last=last,
                pre_vote=pre_vote,
            ),
            now_ms,
        )

    def _send_to_voters(
        self, voter_ids: Iterable[int], build: Callable[[VoterNode], SentRequest], now_ms: int
    ) -> None:
        """One request to each voter of the latest set that is ready (ids the set lacks are skipped)."""
        ctx = self._ctx
        voters = ctx.voters
        for voter_id in voter_ids:
            voter = voters.get(voter_id)
            if voter is not None:
                ctx.requests.send(voter_id, voter.endpoints, build(voter), now_ms)

    def _backoff_ms(self) -> int:
        """Binary exponential backoff after a lost candidacy, capped (Kafka's formula)."""
        self._retries += 1
        exponent = min(20, self._retries - 1)
        return min(_RETRY_BACKOFF_BASE_MS * self._ctx.rng.randrange(2 << exponent), self._ctx.config.election_backoff_max_ms)

    def maybe_advance(self, now_ms: int) -> None:
        """Prospective -> Candidate -> Leader as soon as the tally allows (or give up)."""
        ctx = self._ctx
        state = ctx.quorum.state
        if isinstance(state, ProspectiveState):
            if state.election.is_granted():
                ctx.requests.reset()
                ctx.quorum.transition_to_candidate(now_ms=now_ms)
                self.maybe_advance(now_ms)
            elif state.election.is_rejected():
                self._prospective_lost(state, now_ms)
        elif isinstance(state, CandidateState) and state.backoff_until_ms is None:
            if state.election.is_granted():
                self._retries = 0
                self._become_leader(now_ms)
            elif state.election.is_rejected():
                state.backoff_until_ms = now_ms + self._backoff_ms()

    # -- failures ----------------------------------------------------------------------------------
    def on_vote_unsupported(self, inflight: Inflight, now_ms: int) -> bool:
        """A voter that does not understand pre-vote (Vote v2): fall back to a real candidacy."""
        state = self._ctx.quorum.state
        request = inflight.request
        if (
            isinstance(state, ProspectiveState)
            and isinstance(request, vote_req.VoteRequest)
            and request.topics[0].partitions[0].pre_vote
        ):
            self._ctx.requests.reset()
            self._ctx.quorum.transition_to_candidate(now_ms=now_ms)
            self.maybe_advance(now_ms)
            return True
        return False

    def maybe_fail_over(self, inflight: Inflight, now_ms: int) -> bool:
        """A voter whose connection to the leader it fetches from broke, and whose immediate
        retry failed too, starts pre-vote at once. Returns True to retry without backoff.

        Kafka waits out `controller.quorum.fetch.timeout.ms` (2 s) before a follower stands; a
        connection that breaks and then cannot be re-established (`RequestFailure.DISCONNECTED`
        twice in a row: reset or closed, then refused) is a much earlier and much stronger sign
        that the leader's process is gone. One broken connection alone is retried at once,
        without the retry backoff: a dead leader's host refuses the reconnect within a round
        trip, while a connection lost to a passing fault reconnects and the follower carries on
        without troubling anyone. A request that merely got no answer (`TIMED_OUT`, a frozen or
        partitioned leader) keeps the fetch timeout.

        Why this cannot disrupt a healthy leader: the follower only becomes Prospective. A
        pre-vote bumps no epoch and persists nothing, and it turns into a candidacy only with a
        majority of pre-votes granted. The leader rejects every (pre-)vote, and a follower that
        has fetched from its leader in this epoch rejects pre-votes until its own fetch timeout
        expires (`can_grant_vote`, Kafka's FollowerState rule). So the epoch moves only when a
        majority of voters have lost the leader too (by this rule or by their fetch timeout); a
        follower that alone cannot reach a live leader costs one rejected pre-vote, after which
        it returns to following the same leader in the same epoch.

        Only a follower that has fetched from the leader in this state fails over early: it had
        a working connection that then broke. One that returned from a lost pre-vote (or never
        reached the leader) waits out the fetch timeout as before, so a leader that only this
        follower cannot reach does not keep it cycling through pre-votes. Observers never stand.

        The pre-votes go out after a random delay in [0, election timeout / 4). When the leader
        dies, every surviving follower sees its connection break at the same instant; if they
        all asked at once, each could grant the others' pre-votes, stand, vote for itself and
        split the real vote, costing an election timeout plus backoff. A window that is wide
        against a round trip (ms on a LAN) makes two starts within one round trip unlikely,
        while a quarter of the election timeout keeps the worst case far below the 2 s fetch
        timeout this path replaces. Meanwhile the follower is already Prospective, so it grants
        the pre-vote of whichever survivor asks first.
        """
        ctx = self._ctx
        state = ctx.quorum.state
        if (
            not isinstance(state, FollowerState)
            or inflight.destination_id != state.leader_id
            or not state.has_fetched_from_leader
            or not ctx.quorum.is_voter()
        ):
            return False
        if not state.leader_connection_broken:
            state.leader_connection_broken = True
            return True
        window_ms = max(1, ctx.config.election_timeout_ms // 4)
        self.start_prospective(now_ms, pre_vote_delay_ms=ctx.rng.randrange(window_ms))
        return False

    # -- Vote --------------------------------------------------------------------------------------
    def handle_vote_request(self, request: vote_req.VoteRequest, token: int, now_ms: int) -> vote_resp.VoteResponse:
        ctx = self._ctx

        def reply(error: ErrorCode, granted: bool = False, top: ErrorCode = ErrorCode.none) -> vote_resp.VoteResponse:
            return messages.vote_response(
                error=error, leader_id=ctx.leader_id, epoch=ctx.epoch, granted=granted, endpoints=ctx.leader_endpoints(),
                listener=ctx.config.controller_listener_name, top_level_error=top,
            )

        if not ctx.check_cluster_id(request.cluster_id):
            return reply(ErrorCode.none, top=ErrorCode.inconsistent_cluster_id)
        partition = messages.single_partition(request.topics, topic_field="topic_name", partition_field="partition_index")
        if partition is None:
            return reply(ErrorCode.none, top=ErrorCode.invalid_request)
        replica_epoch = int(partition.replica_epoch)
        last_epoch = int(partition.last_offset_epoch)
        last_offset = int(partition.last_offset)
        pre_vote = bool(partition.pre_vote)
        if last_offset < 0 or last_epoch < 0 or (last_epoch > replica_epoch if pre_vote else last_epoch >= replica_epoch):
            return reply(ErrorCode.invalid_request)
        if replica_epoch < ctx.epoch:
            return reply(ErrorCode.fenced_leader_epoch)
        if int(partition.replica_id) < 0:
            return reply(ErrorCode.invalid_request)
        if replica_epoch > ctx.epoch and not pre_vote:
            self._transitions.to_unattached(replica_epoch, now_ms)
        if not ctx.is_local_key(int(request.voter_id), partition.voter_directory_id):
            return reply(ErrorCode.invalid_voter_key)
        candidate = ReplicaKey.of(int(partition.replica_id), partition.replica_directory_id)
        up_to_date = OffsetAndEpoch(epoch=last_epoch, offset=last_offset) >= ctx.log.end_offset()
        granted = self.can_grant_vote(candidate, up_to_date=up_to_date, pre_vote=pre_vote)
        if granted and not pre_vote:
            state = ctx.quorum.state
            if isinstance(state, UnattachedState | ProspectiveState) and state.voted_key is None:
                ctx.quorum.transition_to_unattached_voted(candidate, epoch=replica_epoch, now_ms=now_ms)
                ctx.requests.reset()
        return reply(ErrorCode.none, granted)

    def can_grant_vote(self, candidate: ReplicaKey, *, up_to_date: bool, pre_vote: bool) -> bool:
        # No "am I a voter" check, as in Kafka since KIP-853: the candidate asked us because its
        # voter set has us, and ours may be stale (we may not have read our own addition yet).
        # Refusing would stall an election that needs us. Brokers are never asked.
        state = self._ctx.quorum.state
        if isinstance(state, UnattachedState | ProspectiveState):
            if pre_vote:
                return up_to_date
            if state.voted_key is not None:
                voted = state.voted_key
                return voted.id == candidate.id and (voted.directory_id is None or voted.directory_id == candidate.directory_id)
            if state.leader_id is not None:
                return False
            return up_to_date
        if isinstance(state, CandidateState):
            return pre_vote and up_to_date
        if isinstance(state, FollowerState):
            # A follower still supports its leader unless it never managed to fetch from it.
            return pre_vote and not state.has_fetched_from_leader and up_to_date
        return False

    def handle_vote_response(self, inflight: Inflight, response: vote_resp.VoteResponse, now_ms: int) -> bool:
        if response.error_code == ErrorCode.unsupported_version:
            return self.on_vote_unsupported(inflight, now_ms)
        partition, handled = self._epoch_response(response, _partition_of(response), now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        epoch = int(partition.leader_epoch)
        if partition.error_code != ErrorCode.none:
            return False
        request = inflight.request
        if not isinstance(request, vote_req.VoteRequest):
            return False
        sent_pre_vote = bool(request.topics[0].partitions[0].pre_vote)
        state = self._ctx.quorum.state
        voter_id = inflight.destination_id
        if (isinstance(state, ProspectiveState) and sent_pre_vote and epoch == state.epoch) or (
            isinstance(state, CandidateState) and not sent_pre_vote and epoch == state.epoch
        ):
            if partition.vote_granted:
                state.election.record_granted(voter_id)
            else:
                state.election.record_rejected(voter_id)
            self.maybe_advance(now_ms)
        return True

    # -- BeginQuorumEpoch / EndQuorumEpoch ---------------------------------------------------------
    def _accept_leader_announcement(
        self,
        *,
        cluster_id: str | None,
        partition: begin_req.PartitionData | end_req.PartitionData | None,
        voter_id: int,
        leader_endpoints: tuple[Endpoint, ...],
        now_ms: int,
    ) -> tuple[ErrorCode, ErrorCode]:
        """Checks shared by BeginQuorumEpoch and EndQuorumEpoch, then learn the announced leader.

        Returns (partition error, top-level error): both none once transitioned.
        """
        ctx = self._ctx
        if not ctx.check_cluster_id(cluster_id):
            return ErrorCode.none, ErrorCode.inconsistent_cluster_id
        if partition is None:
            return ErrorCode.none, ErrorCode.invalid_request
        leader_id = int(partition.leader_id)
        epoch = int(partition.leader_epoch)
        if epoch < ctx.epoch:
            return ErrorCode.fenced_leader_epoch, ErrorCode.none
        if leader_id < 0 or leader_id == ctx.node_id:
            return ErrorCode.invalid_request, ErrorCode.none
        directory_id = partition.voter_directory_id if isinstance(partition, begin_req.PartitionData) else None
        if not ctx.is_local_key(voter_id, directory_id):
            return ErrorCode.invalid_voter_key, ErrorCode.none
        self._transitions.maybe_transition(leader_id, epoch, ctx.endpoints_for(leader_id, leader_endpoints), now_ms)
        return ErrorCode.none, ErrorCode.none

    def handle_begin_quorum_epoch_request(
        self, request: begin_req.BeginQuorumEpochRequest, token: int, now_ms: int
    ) -> begin_resp.BeginQuorumEpochResponse:
        error, top = self._accept_leader_announcement(
            cluster_id=request.cluster_id,
            partition=messages.single_partition(request.topics, topic_field="topic_name", partition_field="partition_index"),
            voter_id=int(request.voter_id),
            leader_endpoints=tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.leader_endpoints),
            now_ms=now_ms,
        )
        ctx = self._ctx
        return messages.begin_quorum_epoch_response(
            error=error, leader_id=ctx.leader_id, epoch=ctx.epoch, endpoints=ctx.leader_endpoints(),
            listener=ctx.config.controller_listener_name, top_level_error=top,
        )

    def handle_end_quorum_epoch_request(
        self, request: end_req.EndQuorumEpochRequest, token: int, now_ms: int
    ) -> end_resp.EndQuorumEpochResponse:
        ctx = self._ctx
        partition = messages.single_partition(request.topics, topic_field="topic_name", partition_field="partition_index")
        error, top = self._accept_leader_announcement(
            cluster_id=request.cluster_id,
            partition=partition,
            voter_id=-1,  # EndQuorumEpoch names no voter
            leader_endpoints=tuple(Endpoint(e.name, e.host, int(e.port)) for e in request.leader_endpoints),
            now_ms=now_ms,
        )
        state = ctx.quorum.state
        if (
            error == ErrorCode.none
            and top == ErrorCode.none
            and partition is not None
            and isinstance(state, FollowerState)
            and state.leader_id == int(partition.leader_id)
        ):
            preferred = [ReplicaKey.of(int(c.candidate_id), c.candidate_directory_id) for c in partition.preferred_candidates]
            state.fetch_deadline_ms = min(state.fetch_deadline_ms, now_ms + self._end_epoch_backoff_ms(preferred))
        return messages.end_quorum_epoch_response(
            error=error, leader_id=ctx.leader_id, epoch=ctx.epoch, endpoints=ctx.leader_endpoints(),
            listener=ctx.config.controller_listener_name, top_level_error=top,
        )

    def _end_epoch_backoff_ms(self, preferred: list[ReplicaKey]) -> int:
        """Strict exponential backoff by our position among the preferred successors: the most
        caught-up voter starts its election first (KafkaRaftClient.endEpochElectionBackoff)."""
        position = 0
        for candidate in preferred:
            if self._ctx.is_local_candidate(candidate):
                break
            position += 1
        total = len(preferred)
        maximum = self._ctx.config.election_backoff_max_ms
        if position == 0:
            return 0
        if position >= total:
            return maximum
        base_ms = maximum >> (total - 1)
        return min(maximum, base_ms << (position - 1))

    def _epoch_response(
        self, response: _EpochResponse, partition: _EpochPartitionT | None, now_ms: int
    ) -> tuple[_EpochPartitionT | None, bool | None]:
        """Top-level error, single partition and the common epoch/leader handling of a Vote,
        BeginQuorumEpoch or EndQuorumEpoch response: (partition or None, handled-outcome)."""
        if response.error_code != ErrorCode.none or partition is None:
            return None, False
        leader_id = messages.optional_id(partition.leader_id)
        handled = self._transitions.maybe_handle_common_response(
            error=partition.error_code,
            leader_id=leader_id,
            epoch=int(partition.leader_epoch),
            endpoints=messages.response_endpoints(response.node_endpoints, leader_id, self._ctx.config.controller_listener_name),
            now_ms=now_ms,
        )
        return partition, handled

    def handle_begin_quorum_epoch_response(
        self, inflight: Inflight, response: begin_resp.BeginQuorumEpochResponse, now_ms: int
    ) -> bool:
        partition, handled = self._epoch_response(response, _partition_of(response), now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        state = self._ctx.quorum.state
        if partition.error_code == ErrorCode.none and isinstance(state, LeaderState) and int(partition.leader_epoch) == state.epoch:
            state.add_acknowledgement_from(inflight.destination_id)
            return True
        return bool(partition.error_code == ErrorCode.none)

    def handle_end_quorum_epoch_response(self, inflight: Inflight, response: end_resp.EndQuorumEpochResponse, now_ms: int) -> bool:
        partition, handled = self._epoch_response(response, _partition_of(response), now_ms)
        if partition is None or handled is not None:
            return bool(handled)
        state = self._ctx.quorum.state
        if partition.error_code == ErrorCode.none and isinstance(state, ResignedState):
            state.unacked_voters.discard(inflight.destination_id)
            return True
        return bool(partition.error_code == ErrorCode.none)


@overload
def _partition_of(response: vote_resp.VoteResponse) -> vote_resp.PartitionData | None: ...
@overload
def _partition_of(response: begin_resp.BeginQuorumEpochResponse) -> begin_resp.PartitionData | None: ...
@overload
def _partition_of(response: end_resp.EndQuorumEpochResponse) -> end_resp.PartitionData | None: ...
def _partition_of(response: _EpochResponse) -> object:
    return messages.single_partition(response.topics, topic_field="topic_name", partition_field="partition_index")
