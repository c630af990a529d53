"""The classic group coordinator's decisions for the groups of one `__consumer_offsets` partition.

Kafka's GroupMetadataManager (classic groups) and OffsetMetadataManager as a pure core: the shell
(`server.group_apis`) hands it requests with the current time and a token per request, and it
answers with data: replies to send (now, or once a rebalance completes), records to write to the
partition (acks=all) before some replies may go, and the next deadline. It never sleeps, reads a
clock or draws randomness (member ids come from the `new_id` function it is handed).

The group state machine is Kafka's:

    Empty --join--> PreparingRebalance --all joined / timeout--> CompletingRebalance
    CompletingRebalance --leader's SyncGroup written--> Stable
    Stable | CompletingRebalance --join of a new or changed member, leave, expiry--> PreparingRebalance
    PreparingRebalance --no member left at completion--> Empty
    any --group deleted or offsets expired away--> Dead (then forgotten)

- A rebalance from Empty waits `group.initial.rebalance.delay.ms`, extended by the same delay
  while new members keep arriving, never past the rebalance timeout (Kafka's InitialDelayedJoin).
  Any other rebalance completes as soon as every member has rejoined and no member id handed out
  with MEMBER_ID_REQUIRED is still pending, or at the largest rebalance timeout of the members;
  members that did not rejoin by then are removed.
- Each completed join phase is a new generation. The protocol is the one every member supports
  that most members prefer; the leader (the first member, or the first remaining one) gets every
  member's metadata for it and sends the assignment in its SyncGroup. That assignment is written
  as a GroupMetadataValue, and only once written do the members get their assignments and the
  group become Stable. Members that have not sent SyncGroup within the rebalance timeout are
  removed and the group rebalances again.
- A member is alive while it heartbeats within its session timeout (JoinGroup, SyncGroup,
  Heartbeat and OffsetCommit count), or while its JoinGroup or SyncGroup is parked here.
- Static members (`group.instance.id`) keep their place across restarts: a JoinGroup with an
  unknown member id and a known instance id replaces the old member id (fencing it with
  FENCED_INSTANCE_ID) and, in a Stable group whose chosen protocol's metadata did not change,
  needs no rebalance: a returning leader gets the members with skip_assignment (JoinGroup v9+,
  KIP-814); a leader on an older version must assign again, so the group rebalances.
- Only a member of the current generation commits offsets (ILLEGAL_GENERATION otherwise, or
  REBALANCE_IN_PROGRESS while the assignment is being decided); generation -1 with no member id
  commits only to an Empty or unknown group (a simple consumer or an admin reset).
- Offsets expire as Kafka's rules say (KIP-211): in an Empty group, `offsets.retention.minutes`
  after the group became Empty; in a Stable consumer group, offsets of topics no member subscribes
  to, that long after their commit; in a group without a protocol type (simple), that long after
  their commit; an offset committed with an expire timestamp (v1) at that timestamp. An Empty
  group whose last offset expired is deleted.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from kraft_engine.invariant import require
from kraft_engine.records.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
)

__all__ = [
    "CommittedOffset",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupListing",
    "GroupRecord",
    "GroupState",
    "JoinAnswer",
    "JoinRequest",
    "MemberDescription",
    "Output",
    "SyncAnswer",
    "Write",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
_NO_GENERATION = -1


class GroupState(enum.Enum):
    """Kafka's classic group states, with the names DescribeGroups and ListGroups report."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.STABLE, GroupState.COMPLETING_REBALANCE}),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Kafka's `group.*` and `offsets.*` broker settings the coordinator decides with."""

    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_size: int = 2**31 - 1
    offsets_retention_ms: int = 7 * 24 * 60 * 60 * 1000


GroupRecord = tuple[OffsetCommitKey | GroupMetadataKey, OffsetCommitValue | GroupMetadataValue | None]
"""One record for `__consumer_offsets`: its key and its value (None: a tombstone)."""


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool = True
    supports_skip_assignment: bool = True  # JoinGroup v9+ (KIP-814)


@dataclass(frozen=True, slots=True)
class JoinAnswer:
    token: int
    error: ErrorCode
    member_id: str
    generation: int = _NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # (member id, instance id, metadata), leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncAnswer:
    token: int
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class Write:
    """Records to append to the partition (acks=all); `replies` go once they are written."""

    records: tuple[GroupRecord, ...]
    replies: tuple[JoinAnswer | SyncAnswer, ...] = ()


Output = JoinAnswer | SyncAnswer | Write


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: GroupState
    protocol_type: str
    protocol_name: str
    members: tuple[MemberDescription, ...]


@dataclass(frozen=True, slots=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: GroupState


@dataclass(eq=False)
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    join_token: int | None = None
    sync_token: int | None = None
    heartbeat_deadline_ms: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        for name, data in self.protocols:
            if name == protocol:
                return data
        return b""

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]


@dataclass(eq=False)
class _Group:
    group_id: str
    state_timestamp_ms: int
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> expiry (MEMBER_ID_REQUIRED)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], CommittedOffset] = field(default_factory=dict)
    join_deadline_ms: int | None = None
    initial_remaining_ms: int = 0
    new_member_added: bool = False
    sync_deadline_ms: int | None = None
    pending_sync: set[str] = field(default_factory=set)

    def transition(self, state: GroupState, *, now_ms: int) -> None:
        require(self.state in _VALID_PREVIOUS[state],
                f"group {self.group_id}: no transition from {self.state.value} to {state.value}")
        self.previous_state = self.state
        self.state = state
        self.state_timestamp_ms = now_ms

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.join_token is not None for m in self.members.values())

    def supports(self, protocol_type: str, names: list[str]) -> bool:
        if not self.members:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type:
            return False
        return any(all(name in m.protocol_names() for m in self.members.values()) for name in names)

    def select_protocol(self) -> str:
        members = list(self.members.values())
        candidates = [n for n in members[0].protocol_names() if all(n in m.protocol_names() for m in members)]
        require(bool(candidates), f"group {self.group_id}: no protocol every member supports")
        votes = dict.fromkeys(candidates, 0)
        for member in members:
            votes[next(n for n in member.protocol_names() if n in votes)] += 1
        return max(candidates, key=lambda n: votes[n])  # first of the most-voted, in the first member's order

    def snapshot(self) -> GroupMetadataValue:
        return GroupMetadataValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberMetadata(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                               client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                               session_timeout_ms=m.session_timeout_ms, subscription=m.metadata(self.protocol_name),
                               assignment=m.assignment)
                for m in self.members.values()
            ),
        )


class GroupCoordinator:
    """The groups of one `__consumer_offsets` partition this broker leads."""

    def __init__(self, *, config: GroupConfig, new_id: Callable[[], str],
                 subscribed_topics: Callable[[str, bytes], frozenset[str] | None] | None = None) -> None:
        self._config = config
        self._new_id = new_id
        self._subscribed_topics = subscribed_topics or (lambda _type, _metadata: None)
        self._groups: dict[str, _Group] = {}

    # -- reading ----------------------------------------------------------------------------------
    @property
    def group_ids(self) -> list[str]:
        return sorted(self._groups)

    def state_of(self, group_id: str) -> GroupState:
        group = self._groups.get(group_id)
        return GroupState.DEAD if group is None else group.state

    def generation_of(self, group_id: str) -> int:
        group = self._groups.get(group_id)
        return _NO_GENERATION if group is None else group.generation

    def leader_of(self, group_id: str) -> str | None:
        group = self._groups.get(group_id)
        return None if group is None else group.leader_id

    def member_ids(self, group_id: str) -> list[str]:
        group = self._groups.get(group_id)
        return [] if group is None else list(group.members)

    def list_groups(self) -> list[GroupListing]:
        return [GroupListing(group_id=g.group_id, protocol_type=g.protocol_type or "", state=g.state)
                for g in sorted(self._groups.values(), key=lambda g: g.group_id)]

    def describe(self, group_id: str) -> GroupDescription | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        stable = group.state is GroupState.STABLE
        return GroupDescription(
            group_id=group_id, state=group.state, protocol_type=group.protocol_type or "",
            protocol_name=(group.protocol_name or "") if stable else "",
            members=tuple(
                MemberDescription(member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                                  client_host=m.client_host,
                                  metadata=m.metadata(group.protocol_name) if stable else b"",
                                  assignment=m.assignment if stable else b"")
                for m in group.members.values()
            ),
        )

    def committed(self, group_id: str, partitions: Iterable[tuple[str, int]] | None = None
                  ) -> dict[tuple[str, int], CommittedOffset]:
        group = self._groups.get(group_id)
        if group is None:
            return {}
        if partitions is None:
            return dict(sorted(group.offsets.items()))
        return {tp: group.offsets[tp] for tp in partitions if tp in group.offsets}

    def next_deadline_ms(self) -> int | None:
        deadlines: list[int] = []
        for group in self._groups.values():
            deadlines.extend(group.pending_members.values())
            deadlines.extend(m.heartbeat_deadline_ms for m in group.members.values()
                             if m.join_token is None and m.sync_token is None)
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None:
                deadlines.append(group.sync_deadline_ms)
        return min(deadlines, default=None)

    # -- JoinGroup --------------------------------------------------------------------------------
    def join(self, request: JoinRequest, *, token: int, now_ms: int) -> list[Output]:
        def refuse(error: ErrorCode) -> list[Output]:
            return [JoinAnswer(token=token, error=error, member_id=request.member_id)]

        if not request.group_id:
            return refuse(ErrorCode.invalid_group_id)
        if not self._config.min_session_timeout_ms <= request.session_timeout_ms <= self._config.max_session_timeout_ms:
            return refuse(ErrorCode.invalid_session_timeout)
        group = self._groups.get(request.group_id)
        if group is None:
            if request.member_id:
                return refuse(ErrorCode.unknown_member_id)
            group = _Group(group_id=request.group_id, state_timestamp_ms=now_ms)
            self._groups[request.group_id] = group
        if group.state is GroupState.DEAD:
            return refuse(ErrorCode.coordinator_not_available)
        names = [name for name, _ in request.protocols]
        known = request.member_id in group.members or request.member_id in group.pending_members
        if not known and len(group.members) + len(group.pending_members) >= self._config.max_size:
            return refuse(ErrorCode.group_max_size_reached)
        if not request.member_id:
            if not group.supports(request.protocol_type, names):
                return refuse(ErrorCode.inconsistent_group_protocol)
            if request.group_instance_id is not None and request.group_instance_id in group.static_members:
                return self._replace_static_member(group, request, token=token, now_ms=now_ms)
            prefix = request.group_instance_id if request.group_instance_id is not None else request.client_id
            member_id = f"{prefix}-{self._new_id()}"
            if request.group_instance_id is None and request.require_known_member_id:
                group.pending_members[member_id] = now_ms + request.session_timeout_ms
                return [JoinAnswer(token=token, error=ErrorCode.member_id_required, member_id=member_id)]
            return self._add_member(group, request, member_id=member_id, token=token, now_ms=now_ms)
        if request.member_id in group.pending_members:
            if not group.supports(request.protocol_type, names):
                return refuse(ErrorCode.inconsistent_group_protocol)
            del group.pending_members[request.member_id]
            return self._add_member(group, request, member_id=request.member_id, token=token, now_ms=now_ms)
        error = _member_error(group, request.member_id, request.group_instance_id)
        if error is not ErrorCode.none:
            return refuse(error)
        member = group.members[request.member_id]
        if len(group.members) > 1 and not _supports_excluding(group, member, request.protocol_type, names):
            return refuse(ErrorCode.inconsistent_group_protocol)
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            outputs = self._park_join(member, request, token=token)
            outputs += self._maybe_complete_join(group, now_ms=now_ms)
            return outputs
        if group.state is GroupState.COMPLETING_REBALANCE:
            if member.protocols == request.protocols:
                # A member that lost its JoinGroup answer asks again: the same generation's answer.
                return [self._join_answer(group, member, token=token)]
            outputs = self._park_join(member, request, token=token)
            return outputs + self._prepare_rebalance(group, now_ms=now_ms)
        # Stable: the leader rejoining, or changed metadata, is a new rebalance; otherwise the
        # member gets the current generation again.
        if group.leader_id == member.member_id or member.protocols != request.protocols:
            outputs = self._park_join(member, request, token=token)
            return outputs + self._prepare_rebalance(group, now_ms=now_ms)
        return [self._join_answer(group, member, token=token)]

    def _add_member(self, group: _Group, request: JoinRequest, *, member_id: str, token: int, now_ms: int) -> list[Output]:
        member = _Member(
            member_id=member_id, group_instance_id=request.group_instance_id, client_id=request.client_id,
            client_host=request.client_host, session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms, protocol_type=request.protocol_type,
            protocols=request.protocols, join_token=token, heartbeat_deadline_ms=now_ms + request.session_timeout_ms,
        )
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        if group.state is GroupState.PREPARING_REBALANCE:
            group.new_member_added = True
            return self._maybe_complete_join(group, now_ms=now_ms)
        return self._prepare_rebalance(group, now_ms=now_ms)

    def _replace_static_member(self, group: _Group, request: JoinRequest, *, token: int, now_ms: int) -> list[Output]:
        instance_id = request.group_instance_id
        require(instance_id is not None, "only static members are replaced")
        old_id = group.static_members[instance_id or ""]
        member = group.members[old_id]
        outputs: list[Output] = []
        if member.join_token is not None:
            outputs.append(JoinAnswer(token=member.join_token, error=ErrorCode.fenced_instance_id, member_id=old_id))
            member.join_token = None
        if member.sync_token is not None:
            outputs.append(SyncAnswer(token=member.sync_token, error=ErrorCode.fenced_instance_id))
            member.sync_token = None
        new_id = f"{instance_id}-{self._new_id()}"
        old_metadata = member.metadata(group.protocol_name)
        was_leader = group.leader_id == old_id
        del group.members[old_id]
        group.pending_sync.discard(old_id)
        member.member_id = new_id
        member.client_id, member.client_host = request.client_id, request.client_host
        member.session_timeout_ms, member.rebalance_timeout_ms = request.session_timeout_ms, request.rebalance_timeout_ms
        member.heartbeat_deadline_ms = now_ms + request.session_timeout_ms
        member.protocols = request.protocols
        group.members[new_id] = member
        group.static_members[instance_id or ""] = new_id
        if was_leader:
            group.leader_id = new_id
        if group.state is GroupState.STABLE:
            unchanged = (group.protocol_name in member.protocol_names()
                         and member.metadata(group.protocol_name) == old_metadata)
            # KIP-814: a static leader that comes back gets the members with skip_assignment (v9+),
            # keeping the current assignment; an older leader has to assign again (a rebalance).
            if unchanged and (not was_leader or request.supports_skip_assignment):
                answer = dataclasses.replace(self._join_answer(group, member, token=token), skip_assignment=was_leader)
                return [*outputs, Write(records=(self._group_record(group),), replies=(answer,))]
            outputs += self._park_join(member, request, token=token)
            return outputs + self._prepare_rebalance(group, now_ms=now_ms)
        if group.state is GroupState.COMPLETING_REBALANCE:
            outputs += self._park_join(member, request, token=token)
            return outputs + self._prepare_rebalance(group, now_ms=now_ms)
        require(group.state is GroupState.PREPARING_REBALANCE,
                f"group {group.group_id}: a static member in state {group.state.value}")
        outputs += self._park_join(member, request, token=token)
        return outputs + self._maybe_complete_join(group, now_ms=now_ms)

    def _park_join(self, member: _Member, request: JoinRequest, *, token: int) -> list[Output]:
        outputs: list[Output] = []
        if member.join_token is not None and member.join_token != token:
            # A second JoinGroup from the same member replaces the first, as in Kafka.
            outputs.append(JoinAnswer(token=member.join_token, error=ErrorCode.unknown_member_id, member_id=member.member_id))
        member.join_token = token
        member.protocols = request.protocols
        member.protocol_type = request.protocol_type
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        return outputs

    def _join_answer(self, group: _Group, member: _Member, *, token: int) -> JoinAnswer:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == group.leader_id:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(group.protocol_name)) for m in group.members.values())
        return JoinAnswer(token=token, error=ErrorCode.none, member_id=member.member_id, generation=group.generation,
                          protocol_type=group.protocol_type, protocol_name=group.protocol_name,
                          leader=group.leader_id or "", members=members)

    def _prepare_rebalance(self, group: _Group, *, now_ms: int) -> list[Output]:
        outputs: list[Output] = []
        if group.state is GroupState.COMPLETING_REBALANCE:
            for member in group.members.values():
                member.assignment = b""
        for member in group.members.values():
            if member.sync_token is not None:
                outputs.append(SyncAnswer(token=member.sync_token, error=ErrorCode.rebalance_in_progress))
                member.sync_token = None
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        timeout_ms = group.rebalance_timeout_ms()
        if group.state is GroupState.EMPTY:
            delay_ms = min(self._config.initial_rebalance_delay_ms, timeout_ms)
            group.join_deadline_ms = now_ms + delay_ms
            group.initial_remaining_ms = max(timeout_ms - self._config.initial_rebalance_delay_ms, 0)
            group.new_member_added = False
        else:
            group.join_deadline_ms = now_ms + timeout_ms
        group.transition(GroupState.PREPARING_REBALANCE, now_ms=now_ms)
        return outputs + self._maybe_complete_join(group, now_ms=now_ms)

    def _maybe_complete_join(self, group: _Group, *, now_ms: int) -> list[Output]:
        if (group.state is GroupState.PREPARING_REBALANCE and group.all_joined()
                and group.previous_state is not GroupState.EMPTY):
            return self._complete_join(group, now_ms=now_ms)
        return []

    def _complete_join(self, group: _Group, *, now_ms: int) -> list[Output]:
        outputs: list[Output] = []
        for member in [m for m in group.members.values() if m.join_token is None]:
            outputs += self._remove_member(group, member)
        group.pending_members.clear()
        group.join_deadline_ms = None
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(GroupState.EMPTY, now_ms=now_ms)
            return [Write(records=(self._group_record(group),))]
        group.protocol_name = group.select_protocol()
        group.transition(GroupState.COMPLETING_REBALANCE, now_ms=now_ms)
        for member in group.members.values():
            require(member.join_token is not None, "every remaining member has joined")
            outputs.append(self._join_answer(group, member, token=member.join_token or 0))
            member.join_token = None
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now_ms + group.rebalance_timeout_ms()
        return outputs

    def _remove_member(self, group: _Group, member: _Member) -> list[Output]:
        outputs: list[Output] = []
        if member.join_token is not None:
            outputs.append(JoinAnswer(token=member.join_token, error=ErrorCode.unknown_member_id, member_id=member.member_id))
        if member.sync_token is not None:
            outputs.append(SyncAnswer(token=member.sync_token, error=ErrorCode.unknown_member_id))
        del group.members[member.member_id]
        group.pending_sync.discard(member.member_id)
        if member.group_instance_id is not None and group.static_members.get(member.group_instance_id) == member.member_id:
            del group.static_members[member.group_instance_id]
        if group.leader_id == member.member_id:
            group.leader_id = next(iter(group.members), None)
        return outputs

    def _member_left(self, group: _Group, member: _Member, *, now_ms: int) -> list[Output]:
        outputs = self._remove_member(group, member)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            outputs += self._prepare_rebalance(group, now_ms=now_ms)
        elif group.state is GroupState.PREPARING_REBALANCE:
            outputs += self._maybe_complete_join(group, now_ms=now_ms)
        return outputs

    # -- SyncGroup --------------------------------------------------------------------------------
    def sync(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
             protocol_type: str | None, protocol_name: str | None, assignments: Mapping[str, bytes],
             token: int, now_ms: int) -> list[Output]:
        def refuse(error: ErrorCode) -> list[Output]:
            return [SyncAnswer(token=token, error=error)]

        group = self._groups.get(group_id)
        if group is None:
            return refuse(ErrorCode.unknown_member_id)
        if group.state is GroupState.DEAD:
            return refuse(ErrorCode.coordinator_not_available)
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return refuse(error)
        if generation != group.generation:
            return refuse(ErrorCode.illegal_generation)
        if (protocol_type is not None and protocol_type != group.protocol_type) or \
                (protocol_name is not None and protocol_name != group.protocol_name):
            return refuse(ErrorCode.inconsistent_group_protocol)
        member = group.members[member_id]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return refuse(ErrorCode.rebalance_in_progress)
        if group.state is GroupState.STABLE:
            group.pending_sync.discard(member_id)
            if not group.pending_sync:
                group.sync_deadline_ms = None
            return [self._sync_answer(group, member, token=token)]
        # CompletingRebalance: park until the leader's assignment is written.
        outputs: list[Output] = []
        if member.sync_token is not None:
            outputs.append(SyncAnswer(token=member.sync_token, error=ErrorCode.unknown_member_id))
        member.sync_token = token
        group.pending_sync.discard(member_id)
        if member_id != group.leader_id:
            return outputs
        for m in group.members.values():
            m.assignment = bytes(assignments.get(m.member_id, b""))
        group.transition(GroupState.STABLE, now_ms=now_ms)
        if not group.pending_sync:
            group.sync_deadline_ms = None
        replies = []
        for m in group.members.values():
            if m.sync_token is not None:
                replies.append(self._sync_answer(group, m, token=m.sync_token))
                m.sync_token = None
        return [*outputs, Write(records=(self._group_record(group),), replies=tuple(replies))]

    def _sync_answer(self, group: _Group, member: _Member, *, token: int) -> SyncAnswer:
        return SyncAnswer(token=token, error=ErrorCode.none, protocol_type=group.protocol_type,
                          protocol_name=group.protocol_name, assignment=member.assignment)

    # -- Heartbeat and LeaveGroup -------------------------------------------------------------------
    def heartbeat(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                  now_ms: int) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        member = group.members[member_id]
        if group.state is GroupState.EMPTY:
            return ErrorCode.unknown_member_id
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if group.state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        if generation != group.generation:
            return ErrorCode.illegal_generation
        return ErrorCode.none

    def leave(self, *, group_id: str, members: Iterable[tuple[str, str | None]], now_ms: int
              ) -> tuple[ErrorCode, list[ErrorCode], list[Output]]:
        """(group error, one error per (member id, instance id) asked to leave, outputs)."""
        wanted = list(members)
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            error = ErrorCode.unknown_member_id if group is None else ErrorCode.coordinator_not_available
            return error, [error] * len(wanted), []
        errors: list[ErrorCode] = []
        outputs: list[Output] = []
        for asked_id, instance_id in wanted:
            member_id = asked_id
            if instance_id is not None:
                known = group.static_members.get(instance_id)
                if known is None:
                    errors.append(ErrorCode.unknown_member_id)
                    continue
                if asked_id and asked_id != known:
                    errors.append(ErrorCode.fenced_instance_id)
                    continue
                member_id = known
            elif member_id in group.pending_members:
                del group.pending_members[member_id]
                errors.append(ErrorCode.none)
                outputs += self._maybe_complete_join(group, now_ms=now_ms)
                continue
            member = group.members.get(member_id)
            if member is None:
                errors.append(ErrorCode.unknown_member_id)
                continue
            errors.append(ErrorCode.none)
            outputs += self._member_left(group, member, now_ms=now_ms)
        return ErrorCode.none, errors, outputs

    # -- time ---------------------------------------------------------------------------------------
    def tick(self, *, now_ms: int) -> list[Output]:
        outputs: list[Output] = []
        for group in list(self._groups.values()):
            for member_id, deadline in list(group.pending_members.items()):
                if deadline <= now_ms:
                    del group.pending_members[member_id]
                    outputs += self._maybe_complete_join(group, now_ms=now_ms)
            for member in list(group.members.values()):
                if member.member_id not in group.members:
                    continue
                if member.join_token is None and member.sync_token is None and member.heartbeat_deadline_ms <= now_ms:
                    outputs += self._member_left(group, member, now_ms=now_ms)
            if group.state is GroupState.PREPARING_REBALANCE and group.join_deadline_ms is not None \
                    and group.join_deadline_ms <= now_ms:
                if group.previous_state is GroupState.EMPTY and group.new_member_added and group.initial_remaining_ms > 0:
                    delay_ms = min(self._config.initial_rebalance_delay_ms, group.initial_remaining_ms)
                    group.initial_remaining_ms = max(group.initial_remaining_ms - self._config.initial_rebalance_delay_ms, 0)
                    group.new_member_added = False
                    group.join_deadline_ms = now_ms + delay_ms
                else:
                    outputs += self._complete_join(group, now_ms=now_ms)
            if group.sync_deadline_ms is not None and group.sync_deadline_ms <= now_ms:
                group.sync_deadline_ms = None
                late = [group.members[m] for m in sorted(group.pending_sync) if m in group.members]
                group.pending_sync.clear()
                if late and group.state in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
                    for member in late:
                        outputs += self._remove_member(group, member)
                    outputs += self._prepare_rebalance(group, now_ms=now_ms)
        return outputs

    # -- offsets --------------------------------------------------------------------------------------
    def validate_commit(self, *, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                        now_ms: int) -> ErrorCode:
        group = self._groups.get(group_id)
        if group is None:
            if generation >= 0 or member_id:
                return ErrorCode.illegal_generation
            return ErrorCode.none
        if group.state is GroupState.DEAD:
            return ErrorCode.coordinator_not_available
        if generation < 0 and not member_id and group.state is GroupState.EMPTY:
            return ErrorCode.none
        if group.state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.rebalance_in_progress
        error = _member_error(group, member_id, group_instance_id)
        if error is not ErrorCode.none:
            return error
        if generation != group.generation:
            return ErrorCode.illegal_generation
        member = group.members[member_id]
        member.heartbeat_deadline_ms = max(member.heartbeat_deadline_ms, now_ms + member.session_timeout_ms)
        return ErrorCode.none

    def commit(self, *, group_id: str, offsets: Mapping[tuple[str, int], CommittedOffset], now_ms: int
               ) -> tuple[GroupRecord, ...]:
        """Install validated offsets (`validate_commit` said none) and return their records."""
        group = self._groups.get(group_id)
        if group is None:
            group = _Group(group_id=group_id, state_timestamp_ms=now_ms)
            self._groups[group_id] = group
        records: list[GroupRecord] = []
        for (topic, partition), committed in sorted(offsets.items()):
            group.offsets[(topic, partition)] = committed
            records.append((OffsetCommitKey(group=group_id, topic=topic, partition=partition), _offset_value(committed)))
        return tuple(records)

    def delete_group(self, group_id: str, *, now_ms: int) -> tuple[ErrorCode, tuple[GroupRecord, ...]]:
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, ()
        if group.state is not GroupState.EMPTY:
            return ErrorCode.non_empty_group, ()
        return ErrorCode.none, self._forget(group, now_ms=now_ms)

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]], *, now_ms: int
                       ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode], tuple[GroupRecord, ...]]:
        """OffsetDelete: refused for topics a live consumer group still subscribes to."""
        group = self._groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return ErrorCode.group_id_not_found, {}, ()
        subscribed: frozenset[str] | None = frozenset()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                return ErrorCode.non_empty_group, {}, ()
            subscribed = self._group_subscriptions(group)
        errors: dict[tuple[str, int], ErrorCode] = {}
        records: list[GroupRecord] = []
        for topic, partition in partitions:
            if subscribed is None or topic in subscribed:
                errors[(topic, partition)] = ErrorCode.group_subscribed_to_topic
                continue
            errors[(topic, partition)] = ErrorCode.none
            if group.offsets.pop((topic, partition), None) is not None:
                records.append((OffsetCommitKey(group=group_id, topic=topic, partition=partition), None))
        return ErrorCode.none, errors, tuple(records)

    def expire_offsets(self, *, now_ms: int) -> tuple[GroupRecord, ...]:
        """Kafka's offset retention (see the module docstring): tombstones for what expired."""
        retention_ms = self._config.offsets_retention_ms
        records: list[GroupRecord] = []
        for group in list(self._groups.values()):
            if group.state is GroupState.DEAD:
                continue
            # The time an offset's retention counts from: when the group became Empty, or
            # (simple groups, and unsubscribed topics of a Stable consumer group) its commit.
            since_empty = False
            subscribed: frozenset[str] = frozenset()
            if group.protocol_type:
                if group.state is GroupState.EMPTY:
                    since_empty = True
                elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.state is GroupState.STABLE:
                    topics = self._group_subscriptions(group)
                    if topics is None:
                        continue
                    subscribed = topics
                else:
                    continue
            for (topic, partition), committed in sorted(group.offsets.items()):
                if topic in subscribed:
                    continue
                if committed.expire_timestamp_ms >= 0:
                    expired = now_ms >= committed.expire_timestamp_ms
                else:
                    base_ms = group.state_timestamp_ms if since_empty else committed.commit_timestamp_ms
                    expired = now_ms - base_ms >= retention_ms
                if expired:
                    del group.offsets[(topic, partition)]
                    records.append((OffsetCommitKey(group=group.group_id, topic=topic, partition=partition), None))
            # Kafka deletes an Empty group once none of its offsets is left (cleanupGroupMetadata).
            if not group.offsets and group.state is GroupState.EMPTY and not group.pending_members:
                records.extend(self._forget(group, now_ms=now_ms))
        return tuple(records)

    def _group_subscriptions(self, group: _Group) -> frozenset[str] | None:
        topics: set[str] = set()
        for member in group.members.values():
            found = self._subscribed_topics(group.protocol_type or "", member.metadata(group.protocol_name))
            if found is None:
                return None
            topics |= found
        return frozenset(topics)

    def _forget(self, group: _Group, *, now_ms: int) -> tuple[GroupRecord, ...]:
        records: list[GroupRecord] = [
            (OffsetCommitKey(group=group.group_id, topic=t, partition=p), None) for t, p in sorted(group.offsets)
        ]
        records.append((GroupMetadataKey(group=group.group_id), None))
        group.offsets.clear()
        group.transition(GroupState.DEAD, now_ms=now_ms)
        del self._groups[group.group_id]
        return tuple(records)

    def _group_record(self, group: _Group) -> GroupRecord:
        return GroupMetadataKey(group=group.group_id), group.snapshot()

    # -- loading (replaying the partition) -------------------------------------------------------------
    def replay(self, key: OffsetCommitKey | GroupMetadataKey,
               value: OffsetCommitValue | GroupMetadataValue | None, *, now_ms: int) -> None:
        """Fold one record of the partition into the state, as a newly elected coordinator loads it."""
        if isinstance(key, OffsetCommitKey):
            group = self._groups.get(key.group)
            if value is None:
                if group is not None:
                    group.offsets.pop((key.topic, key.partition), None)
                return
            require(isinstance(value, OffsetCommitValue), "an offset key holds an OffsetCommitValue")
            if group is None:
                group = _Group(group_id=key.group, state_timestamp_ms=now_ms)
                self._groups[key.group] = group
            if isinstance(value, OffsetCommitValue):
                group.offsets[(key.topic, key.partition)] = CommittedOffset(
                    offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
                    commit_timestamp_ms=value.commit_timestamp_ms, expire_timestamp_ms=value.expire_timestamp_ms)
            return
        if value is None:
            self._groups.pop(key.group, None)
            return
        require(isinstance(value, GroupMetadataValue), "a group key holds a GroupMetadataValue")
        if not isinstance(value, GroupMetadataValue):
            return
        previous = self._groups.get(key.group)
        group = _Group(group_id=key.group, state_timestamp_ms=value.current_state_timestamp_ms
                       if value.current_state_timestamp_ms >= 0 else now_ms)
        if previous is not None:
            group.offsets = previous.offsets
        group.generation = value.generation
        group.protocol_type = value.protocol_type or None
        group.protocol_name = value.protocol
        group.leader_id = value.leader
        for m in value.members:
            group.members[m.member_id] = _Member(
                member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
                client_host=m.client_host, session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms if m.rebalance_timeout_ms >= 0 else m.session_timeout_ms,
                protocol_type=value.protocol_type, protocols=((value.protocol or "", m.subscription),),
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        self._groups[key.group] = group

    def loaded(self, *, now_ms: int) -> None:
        """Loading is done: each loaded member has a session timeout from now to heartbeat in."""
        for group in self._groups.values():
            for member in group.members.values():
                member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms


def _member_error(group: _Group, member_id: str, group_instance_id: str | None) -> ErrorCode:
    if group_instance_id is not None:
        known = group.static_members.get(group_instance_id)
        if known is None:
            return ErrorCode.unknown_member_id
        if known != member_id:
            return ErrorCode.fenced_instance_id
        return ErrorCode.none
    return ErrorCode.none if member_id in group.members else ErrorCode.unknown_member_id


def _supports_excluding(group: _Group, member: _Member, protocol_type: str, names: list[str]) -> bool:
    if protocol_type != group.protocol_type:
        return False
    others = [m for m in group.members.values() if m is not member]
    return any(all(name in m.protocol_names() for m in others) for name in names)


def _offset_value(committed: CommittedOffset) -> OffsetCommitValue:
    return OffsetCommitValue(offset=committed.offset, metadata=committed.metadata,
                             commit_timestamp_ms=committed.commit_timestamp_ms, leader_epoch=committed.leader_epoch,
                             expire_timestamp_ms=committed.expire_timestamp_ms)
