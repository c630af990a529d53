"""Learning a newer epoch or leader from any peer (KafkaRaftClient.maybeHandleCommonResponse /
maybeTransition): every api's response and the leader announcements go through here, so the
rules for following a leader or dropping to Unattached live in one place.
"""

from __future__ import annotations

from collections.abc import Callable

from kio.schema.errors import ErrorCode

from kraft_engine.invariant import require
from kraft_engine.raft.leader_state import LeaderState
from kraft_engine.raft.quorum_state import FollowerState, ResignedState, UnattachedState
from kraft_engine.raft.replica_context import RaftContext
from kraft_engine.raft.role import Role
from kraft_engine.raft.voter_set import Endpoint

__all__ = ["EpochTransitions"]


class EpochTransitions:
    """Moves the replica to a newer epoch or a newly learned leader."""

    def __init__(
        self,
        ctx: RaftContext,
        *,
        on_leadership_lost: Callable[[int], None],
        on_following: Callable[[], None],
    ) -> None:
        self._ctx = ctx
        self._on_leadership_lost = on_leadership_lost
        self._on_following = on_following

    def maybe_handle_common_response(
        self, *, error: ErrorCode, leader_id: int | None, epoch: int, endpoints: tuple[Endpoint, ...], now_ms: int
    ) -> bool | None:
        """None: not handled, let the API handler run. True/False: handled (False = back off)."""
        ctx = self._ctx
        endpoints = ctx.endpoints_for(leader_id, endpoints)
        if epoch < ctx.epoch or error == ErrorCode.unknown_leader_epoch:
            return True
        if epoch > ctx.epoch or error in (ErrorCode.fenced_leader_epoch, ErrorCode.not_leader_or_follower):
            self.maybe_transition(leader_id, epoch, endpoints, now_ms)
            return True
        if epoch == ctx.epoch and leader_id is not None and self._lacks_leader_endpoints(leader_id):
            if leader_id != ctx.node_id and endpoints:
                self.to_follower(epoch, leader_id, endpoints, now_ms)
            return None if error == ErrorCode.none else True
        if error == ErrorCode.broker_not_available:
            return False
        if error in (ErrorCode.invalid_voter_key, ErrorCode.inconsistent_cluster_id, ErrorCode.invalid_request):
            return False
        return None

    def maybe_transition(self, leader_id: int | None, epoch: int, endpoints: tuple[Endpoint, ...], now_ms: int) -> None:
        ctx = self._ctx
        if leader_id is not None and leader_id == ctx.node_id:
            # A peer says we lead. If we do not remember it (our disk was re-formatted and the
            # peers still follow our previous incarnation), adopt the epoch and lead nothing: the
            # quorum elects a new leader once their fetches to us fail.
            if ctx.leader_id != ctx.node_id and epoch > ctx.epoch:
                self.to_unattached(epoch, now_ms)
            return
        if epoch == ctx.epoch and leader_id is not None and ctx.leader_id is not None and ctx.leader_id != leader_id:
            raise_inconsistent = ctx.quorum.role in (Role.LEADER, Role.RESIGNED, Role.FOLLOWER)
            require(not raise_inconsistent, f"epoch {epoch} has leader {ctx.leader_id}, a peer says {leader_id}")
        state = ctx.quorum.state
        if epoch > ctx.epoch:
            if leader_id is not None:
                self.to_follower(epoch, leader_id, endpoints, now_ms)
            else:
                self.to_unattached(epoch, now_ms)
        elif (
            leader_id is not None
            and not isinstance(state, LeaderState | ResignedState)
            and (
                self._lacks_leader_endpoints(leader_id)
                or (isinstance(state, FollowerState) and len(endpoints) > len(state.leader_endpoints))
            )
        ):
            self.to_follower(epoch, leader_id, endpoints, now_ms)

    def _lacks_leader_endpoints(self, leader_id: int) -> bool:
        """No leader known, or `leader_id` known only by id (Unattached: e.g. restarted from a
        quorum-state naming a leader whose endpoints this node's voter set does not hold, as an
        observer of a dynamic quorum). Kafka's "discovered more endpoints" rule: the first answer
        that names the leader's endpoints makes us follow it."""
        state = self._ctx.quorum.state
        return self._ctx.leader_id is None or (isinstance(state, UnattachedState) and state.leader_id == leader_id)

    def to_follower(self, epoch: int, leader_id: int, endpoints: tuple[Endpoint, ...], now_ms: int) -> None:
        quorum = self._ctx.quorum
        was_leader = quorum.role is Role.LEADER
        if not endpoints:
            # We cannot fetch without an endpoint: remember the leader's id and discover it later.
            self.to_unattached(epoch, now_ms, leader_id=leader_id)
            return
        state = quorum.state
        if isinstance(state, FollowerState) and state.epoch == epoch and state.leader_id == leader_id:
            state.leader_endpoints = endpoints
            return
        quorum.transition_to_follower(epoch, leader_id=leader_id, endpoints=endpoints, now_ms=now_ms)
        self._on_following()
        self._ctx.requests.reset()
        if was_leader:
            self._on_leadership_lost(now_ms)

    def to_unattached(self, epoch: int, now_ms: int, leader_id: int | None = None) -> None:
        quorum = self._ctx.quorum
        was_leader = quorum.role is Role.LEADER
        quorum.transition_to_unattached(epoch, now_ms=now_ms, leader_id=leader_id)
        self._ctx.requests.reset()
        if was_leader:
            self._on_leadership_lost(now_ms)
