"""The classic group coordinator core: Kafka's rebalance protocol as transcripts, then seeded
simulations of consumers that join, sync, heartbeat, commit, leave, crash and restart (static
members), with the protocol's invariants checked after every step."""

from __future__ import annotations

import dataclasses
import itertools
import random
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from kraft_engine.broker.group_coordinator import (
    CommittedOffset,
    GroupConfig,
    GroupCoordinator,
    GroupState,
    JoinAnswer,
    JoinRequest,
    Output,
    SyncAnswer,
    Write,
)
from kraft_engine.records.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
)

G = "orders-app"
SESSION_MS = 10_000
REBALANCE_MS = 30_000
DELAY_MS = 3_000
PROTOCOLS = (("range", b"r-meta"), ("roundrobin", b"rr-meta"))


def coordinator(**config: int) -> GroupCoordinator:
    counter = itertools.count()
    return GroupCoordinator(config=GroupConfig(initial_rebalance_delay_ms=DELAY_MS, **config),
                            new_id=lambda: f"id{next(counter)}")


def join_request(member_id: str = "", *, client: str = "c", instance: str | None = None,
                 protocols: tuple[tuple[str, bytes], ...] = PROTOCOLS, session_ms: int = SESSION_MS) -> JoinRequest:
    return JoinRequest(group_id=G, member_id=member_id, group_instance_id=instance, client_id=client,
                       client_host="/127.0.0.1", session_timeout_ms=session_ms, rebalance_timeout_ms=REBALANCE_MS,
                       protocol_type="consumer", protocols=protocols)


def by_token(outputs: list[Output]) -> dict[int, JoinAnswer | SyncAnswer]:
    answers: dict[int, JoinAnswer | SyncAnswer] = {}
    for output in outputs:
        for answer in output.replies if isinstance(output, Write) else (output,):
            assert answer.token not in answers
            answers[answer.token] = answer
    return answers


def join_two(gc: GroupCoordinator) -> tuple[str, str]:
    """Two dynamic members through MEMBER_ID_REQUIRED and the initial delay: generation 1."""
    a = by_token(gc.join(join_request(client="a"), token=1, now_ms=0))[1]
    b = by_token(gc.join(join_request(client="b"), token=2, now_ms=0))[2]
    assert a.error == b.error == ErrorCode.member_id_required
    assert gc.join(join_request(a.member_id, client="a"), token=3, now_ms=10) == []
    assert gc.join(join_request(b.member_id, client="b"), token=4, now_ms=20) == []
    assert gc.state_of(G) is GroupState.PREPARING_REBALANCE
    return a.member_id, b.member_id


def test_initial_delay_then_one_generation_with_the_leader_given_every_member() -> None:
    gc = coordinator()
    a, b = join_two(gc)
    # The initial delay (3 s from the first join at 10 ms) was extended once by b's arrival.
    assert by_token(gc.tick(now_ms=3009)) == {}
    answers = by_token(gc.tick(now_ms=3010))
    assert answers == {}, "a new member arrived during the delay: it is extended once more"
    answers = by_token(gc.tick(now_ms=6010))
    assert {t: (x.error, x.generation) for t, x in answers.items()} == {3: (ErrorCode.none, 1), 4: (ErrorCode.none, 1)}
    leader = answers[3]
    assert isinstance(leader, JoinAnswer) and leader.leader == a and leader.protocol_name == "range"
    assert [m for m, _, _ in leader.members] == [a, b]
    assert answers[4].members == ()  # type: ignore[union-attr]
    assert gc.state_of(G) is GroupState.COMPLETING_REBALANCE
    # The follower parks; the leader's assignment is written, then both get theirs.
    assert gc.sync(group_id=G, member_id=b, group_instance_id=None, generation=1, protocol_type="consumer",
                   protocol_name="range", assignments={}, token=5, now_ms=6100) == []
    outputs = gc.sync(group_id=G, member_id=a, group_instance_id=None, generation=1, protocol_type="consumer",
                      protocol_name="range", assignments={a: b"A", b: b"B"}, token=6, now_ms=6200)
    (write,) = outputs
    assert isinstance(write, Write)
    ((key, value),) = write.records
    assert key == GroupMetadataKey(G) and isinstance(value, GroupMetadataValue)
    assert value.generation == 1 and [m.assignment for m in value.members] == [b"A", b"B"]
    assert {r.token: r.assignment for r in write.replies} == {5: b"B", 6: b"A"}  # type: ignore[union-attr]
    assert gc.state_of(G) is GroupState.STABLE


def stable_two(gc: GroupCoordinator) -> tuple[str, str]:
    a, b = join_two(gc)
    gc.tick(now_ms=3010)
    gc.tick(now_ms=6010)
    gc.sync(group_id=G, member_id=b, group_instance_id=None, generation=1, protocol_type=None, protocol_name=None,
            assignments={}, token=5, now_ms=6100)
    gc.sync(group_id=G, member_id=a, group_instance_id=None, generation=1, protocol_type=None, protocol_name=None,
            assignments={a: b"A", b: b"B"}, token=6, now_ms=6100)
    return a, b


def test_a_member_that_stops_heartbeating_is_removed_after_its_session_and_the_group_rebalances() -> None:
    gc = coordinator()
    a, b = stable_two(gc)
    assert gc.heartbeat(group_id=G, member_id=a, group_instance_id=None, generation=1, now_ms=15_000) == ErrorCode.none
    assert gc.tick(now_ms=16_099) == []
    gc.tick(now_ms=16_100)  # b's session (10 s since its SyncGroup at 6.1 s) ran out
    assert gc.member_ids(G) == [a]
    assert gc.state_of(G) is GroupState.PREPARING_REBALANCE
    assert gc.heartbeat(group_id=G, member_id=a, group_instance_id=None, generation=1,
                        now_ms=16_200) == ErrorCode.rebalance_in_progress
    answers = by_token(gc.join(join_request(a, client="a"), token=7, now_ms=16_300))
    assert answers[7].error == ErrorCode.none and answers[7].generation == 2  # type: ignore[union-attr]
    # b is gone: its heartbeat and its commit are refused.
    assert gc.heartbeat(group_id=G, member_id=b, group_instance_id=None, generation=1,
                        now_ms=16_400) == ErrorCode.unknown_member_id
    gc.sync(group_id=G, member_id=a, group_instance_id=None, generation=2, protocol_type=None, protocol_name=None,
            assignments={a: b"AB"}, token=8, now_ms=16_400)
    assert gc.validate_commit(group_id=G, member_id=b, group_instance_id=None, generation=1,
                              now_ms=16_500) == ErrorCode.unknown_member_id


def test_only_the_current_generation_commits() -> None:
    gc = coordinator()
    a, _b = stable_two(gc)
    assert gc.validate_commit(group_id=G, member_id=a, group_instance_id=None, generation=0,
                              now_ms=7000) == ErrorCode.illegal_generation
    assert gc.validate_commit(group_id=G, member_id=a, group_instance_id=None, generation=1, now_ms=7000) == ErrorCode.none
    assert gc.validate_commit(group_id=G, member_id="", group_instance_id=None, generation=-1,
                              now_ms=7000) == ErrorCode.unknown_member_id, "a simple commit into a live group"
    records = gc.commit(group_id=G, offsets={("t", 0): CommittedOffset(42, 3, "", 7000)}, now_ms=7000)
    assert records == ((OffsetCommitKey(G, "t", 0), OffsetCommitValue(offset=42, metadata="", commit_timestamp_ms=7000,
                                                                       leader_epoch=3)),)
    assert gc.committed(G)[("t", 0)].offset == 42


def test_leave_rebalances_at_once_when_everyone_left_has_rejoined() -> None:
    gc = coordinator()
    a, b = stable_two(gc)
    error, errors, outputs = gc.leave(group_id=G, members=[(b, None)], now_ms=7000)
    assert (error, errors, outputs) == (ErrorCode.none, [ErrorCode.none], [])
    answers = by_token(gc.join(join_request(a, client="a"), token=8, now_ms=7100))
    assert answers[8].generation == 2 and answers[8].members[0][0] == a  # type: ignore[union-attr]
    _, _, outputs = gc.leave(group_id=G, members=[(a, None)], now_ms=7200)
    (write,) = outputs
    assert gc.state_of(G) is GroupState.EMPTY and gc.generation_of(G) == 3
    assert isinstance(write, Write) and write.records[0][1].members == ()  # type: ignore[union-attr]


def test_static_member_restart_keeps_its_place_without_a_rebalance() -> None:
    gc = coordinator()
    a = by_token(gc.join(join_request(client="a", instance="pod-a"), token=1, now_ms=0))
    assert a == {}  # static members skip MEMBER_ID_REQUIRED: parked in the initial delay
    b = by_token(gc.join(join_request(client="b", instance="pod-b"), token=2, now_ms=0))
    assert b == {}
    answers = by_token(gc.tick(now_ms=3000) + gc.tick(now_ms=6000))
    a_id, b_id = answers[1].member_id, answers[2].member_id  # type: ignore[union-attr]
    gc.sync(group_id=G, member_id=b_id, group_instance_id="pod-b", generation=1, protocol_type=None, protocol_name=None,
            assignments={}, token=3, now_ms=6000)
    gc.sync(group_id=G, member_id=a_id, group_instance_id="pod-a", generation=1, protocol_type=None, protocol_name=None,
            assignments={a_id: b"A", b_id: b"B"}, token=4, now_ms=6000)
    # pod-b restarts: a new member id, the same generation and assignment, no rebalance.
    (write,) = gc.join(join_request(client="b", instance="pod-b"), token=5, now_ms=8000)
    assert isinstance(write, Write)
    (answer,) = write.replies
    assert answer.error == ErrorCode.none and answer.generation == 1 and answer.member_id != b_id  # type: ignore[union-attr]
    assert gc.state_of(G) is GroupState.STABLE
    # The old incarnation is fenced.
    assert gc.heartbeat(group_id=G, member_id=b_id, group_instance_id="pod-b", generation=1,
                        now_ms=8100) == ErrorCode.fenced_instance_id
    assert by_token(gc.sync(group_id=G, member_id=answer.member_id, group_instance_id="pod-b", generation=1,
                            protocol_type=None, protocol_name=None, assignments={}, token=6,
                            now_ms=8200))[6].assignment == b"B"  # type: ignore[union-attr]


@pytest.mark.parametrize("v9", [True, False])
def test_a_static_leader_coming_back_skips_assignment_from_v9_and_rebalances_before(v9: bool) -> None:
    gc = coordinator()
    gc.join(join_request(client="a", instance="pod-a"), token=1, now_ms=0)
    gc.join(join_request(client="b", instance="pod-b"), token=2, now_ms=0)
    answers = by_token(gc.tick(now_ms=3000) + gc.tick(now_ms=6000))
    a_id, b_id = answers[1].member_id, answers[2].member_id  # type: ignore[union-attr]
    assert answers[1].leader == a_id  # type: ignore[union-attr]
    gc.sync(group_id=G, member_id=a_id, group_instance_id="pod-a", generation=1, protocol_type=None,
            protocol_name=None, assignments={a_id: b"A", b_id: b"B"}, token=3, now_ms=6000)
    request = dataclasses.replace(join_request(client="a", instance="pod-a"), supports_skip_assignment=v9)
    outputs = gc.join(request, token=4, now_ms=7000)
    if v9:
        (write,) = outputs
        (answer,) = write.replies  # type: ignore[union-attr]
        assert answer.skip_assignment and answer.generation == 1  # type: ignore[union-attr]
        assert [m for m, _, _ in answer.members] == [b_id, answer.member_id]  # type: ignore[union-attr]
        assert gc.state_of(G) is GroupState.STABLE
    else:
        assert outputs == [] and gc.state_of(G) is GroupState.PREPARING_REBALANCE


def test_protocol_choice_is_one_every_member_supports() -> None:
    gc = coordinator()
    gc.join(join_request(client="a", instance="a", protocols=(("roundrobin", b"x"), ("range", b"y"))), token=1, now_ms=0)
    assert by_token(gc.join(join_request(client="b", instance="b", protocols=(("sticky", b"z"),)), token=2,
                            now_ms=0))[2].error == ErrorCode.inconsistent_group_protocol
    gc.join(join_request(client="c", instance="c", protocols=(("range", b"y2"),)), token=3, now_ms=0)
    answers = by_token(gc.tick(now_ms=3000) + gc.tick(now_ms=6000))
    assert {a.protocol_name for a in answers.values()} == {"range"}  # type: ignore[union-attr]


def test_session_timeout_outside_the_brokers_bounds_is_refused() -> None:
    gc = coordinator()
    answer = by_token(gc.join(join_request(session_ms=1000), token=1, now_ms=0))[1]
    assert answer.error == ErrorCode.invalid_session_timeout


def test_offsets_of_an_empty_group_expire_after_retention_from_when_it_became_empty() -> None:
    gc = coordinator(offsets_retention_ms=60_000)
    a, b = stable_two(gc)
    gc.commit(group_id=G, offsets={("t", 0): CommittedOffset(5, 0, "", 7000)}, now_ms=7000)
    gc.leave(group_id=G, members=[(a, None), (b, None)], now_ms=100_000)
    assert gc.state_of(G) is GroupState.EMPTY
    assert gc.expire_offsets(now_ms=159_999) == ()
    records = gc.expire_offsets(now_ms=160_000)
    assert records == ((OffsetCommitKey(G, "t", 0), None), (GroupMetadataKey(G), None))
    assert gc.state_of(G) is GroupState.DEAD


def test_simple_group_offsets_expire_from_their_commit() -> None:
    gc = coordinator(offsets_retention_ms=60_000)
    assert gc.validate_commit(group_id="simple", member_id="", group_instance_id=None, generation=-1,
                              now_ms=0) == ErrorCode.none
    gc.commit(group_id="simple", offsets={("t", 0): CommittedOffset(5, 0, "", 0)}, now_ms=0)
    gc.commit(group_id="simple", offsets={("t", 1): CommittedOffset(6, 0, "", 30_000)}, now_ms=30_000)
    assert gc.expire_offsets(now_ms=60_000) == ((OffsetCommitKey("simple", "t", 0), None),)
    assert list(gc.committed("simple")) == [("t", 1)]


def test_replay_restores_a_stable_group_whose_members_heartbeat_on() -> None:
    gc = coordinator()
    a, b = stable_two(gc)
    records = list(gc.commit(group_id=G, offsets={("t", 0): CommittedOffset(9, 1, "m", 7000)}, now_ms=7000))
    _, _, _ = gc.leave(group_id=G, members=[], now_ms=7000)
    snapshot = gc._groups[G].snapshot()  # what the SyncGroup write held
    fresh = coordinator()
    fresh.replay(GroupMetadataKey(G), snapshot, now_ms=50_000)
    for key, value in records:
        fresh.replay(key, value, now_ms=50_000)  # type: ignore[arg-type]
    fresh.loaded(now_ms=50_000)
    assert fresh.state_of(G) is GroupState.STABLE and fresh.member_ids(G) == [a, b]
    assert fresh.heartbeat(group_id=G, member_id=a, group_instance_id=None, generation=1, now_ms=55_000) == ErrorCode.none
    assert fresh.committed(G)[("t", 0)].offset == 9
    assert by_token(fresh.sync(group_id=G, member_id=b, group_instance_id=None, generation=1, protocol_type=None,
                               protocol_name=None, assignments={}, token=1, now_ms=55_000))[1].assignment == b"B"  # type: ignore[union-attr]


# -- seeded simulation ------------------------------------------------------------------------------


@dataclass
class Client:
    name: str
    instance: str | None
    member_id: str = ""
    generation: int = -1
    phase: str = "idle"  # idle, joining, syncing, stable, crashed
    token: int | None = None
    assignment: bytes | None = None


@dataclass
class World:
    rng: random.Random
    gc: GroupCoordinator = field(default_factory=coordinator)
    now_ms: int = 0
    tokens: itertools.count = field(default_factory=lambda: itertools.count(1))  # type: ignore[type-arg]
    waiting: dict[int, Client] = field(default_factory=dict)
    answered: set[int] = field(default_factory=set)
    last_generation: int = 0
    assignments: dict[int, dict[str, bytes]] = field(default_factory=dict)  # generation -> what the leader sent

    def deliver(self, outputs: list[Output]) -> None:
        generation = self.gc.generation_of(G)
        if generation < self.last_generation and self.gc.state_of(G) is not GroupState.DEAD:
            raise AssertionError(f"the generation went back from {self.last_generation} to {generation}")
        self.last_generation = max(self.last_generation, generation)
        for output in outputs:
            replies = output.replies if isinstance(output, Write) else (output,)
            for answer in replies:
                if answer.token in self.answered:
                    raise AssertionError(f"token {answer.token} answered twice")
                self.answered.add(answer.token)
                client = self.waiting.pop(answer.token, None)
                if client is None or client.token != answer.token:
                    continue
                client.token = None
                self.receive(client, answer)

    def receive(self, client: Client, answer: JoinAnswer | SyncAnswer) -> None:
        if isinstance(answer, JoinAnswer):
            if answer.error == ErrorCode.member_id_required:
                client.member_id = answer.member_id
                client.phase = "idle"
            elif answer.error == ErrorCode.none:
                # A successful JoinGroup answer names the group's current generation and a member.
                if answer.generation != self.gc.generation_of(G):
                    raise AssertionError("a JoinGroup answer for a generation that is not the group's")
                if answer.member_id not in self.gc.member_ids(G):
                    raise AssertionError("a JoinGroup answer for a member the group does not have")
                if answer.leader not in self.gc.member_ids(G):
                    raise AssertionError("the leader named is not a member")
                if answer.leader == answer.member_id and {m for m, _, _ in answer.members} != set(self.gc.member_ids(G)):
                    raise AssertionError("the leader was not given exactly the generation's members")
                client.member_id, client.generation, client.phase = answer.member_id, answer.generation, "syncing"
                client.assignment = None
                # A leader told to skip the assignment (a static leader back, KIP-814) keeps the current one.
                assigns = answer.leader == answer.member_id and not answer.skip_assignment
                self.sync(client, leader_members=[m for m, _, _ in answer.members] if assigns else None)
            else:
                self.reset(client, answer.error)
        else:
            if answer.error == ErrorCode.none:
                sent = self.assignments.get(client.generation, {})
                if not _holds(answer.assignment, sent, member_id=client.member_id, instance=client.instance):
                    raise AssertionError(f"{client.name} got {answer.assignment!r}, the leader sent {sent}")
                client.assignment = answer.assignment
                client.phase = "stable"
            elif answer.error == ErrorCode.rebalance_in_progress:
                client.phase = "idle"
            else:
                self.reset(client, answer.error)

    def reset(self, client: Client, error: ErrorCode) -> None:
        if error in (ErrorCode.unknown_member_id, ErrorCode.fenced_instance_id, ErrorCode.illegal_generation):
            client.member_id = "" if error != ErrorCode.illegal_generation else client.member_id
            if error == ErrorCode.fenced_instance_id:
                client.phase = "crashed"  # a fenced static member stops, as Kafka's clients do
                return
        client.phase = "idle"
        client.generation = -1

    def join(self, client: Client) -> None:
        token = next(self.tokens)
        client.token, client.phase = token, "joining"
        self.waiting[token] = client
        self.deliver(self.gc.join(JoinRequest(
            group_id=G, member_id=client.member_id, group_instance_id=client.instance, client_id=client.name,
            client_host="/127.0.0.1", session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            protocol_type="consumer", protocols=PROTOCOLS), token=token, now_ms=self.now_ms))

    def sync(self, client: Client, *, leader_members: list[str] | None) -> None:
        token = next(self.tokens)
        client.token = token
        self.waiting[token] = client
        assignments: dict[str, bytes] = {}
        if leader_members is not None:
            assignments = {m: f"{client.generation}:{m}".encode() for m in leader_members}
            self.assignments[client.generation] = assignments
        self.deliver(self.gc.sync(group_id=G, member_id=client.member_id, group_instance_id=client.instance,
                                  generation=client.generation, protocol_type="consumer", protocol_name=None,
                                  assignments=assignments, token=token, now_ms=self.now_ms))

    def act(self, client: Client) -> None:
        choice = self.rng.random()
        if client.phase == "crashed":
            if client.instance is not None and choice < 0.2:
                client.member_id, client.phase = "", "idle"  # a static member's pod restarts
            return
        if choice < 0.04:
            client.phase, client.token = "crashed", None  # kill -9: silent from now on
            return
        if choice < 0.08 and client.member_id:
            self.deliver(self.gc.leave(group_id=G, members=[(client.member_id, client.instance)], now_ms=self.now_ms)[2])
            client.member_id, client.phase, client.generation, client.token = "", "idle", -1, None
            return
        if client.phase == "idle":
            self.join(client)
        elif client.phase == "stable":
            self.commit(client)
            error = self.gc.heartbeat(group_id=G, member_id=client.member_id, group_instance_id=client.instance,
                                      generation=client.generation, now_ms=self.now_ms)
            if error == ErrorCode.rebalance_in_progress:
                client.phase = "idle"
            elif error != ErrorCode.none:
                self.reset(client, error)

    def commit(self, client: Client) -> None:
        error = self.gc.validate_commit(group_id=G, member_id=client.member_id, group_instance_id=client.instance,
                                        generation=client.generation, now_ms=self.now_ms)
        if error == ErrorCode.none:
            if client.member_id not in self.gc.member_ids(G) or client.generation != self.gc.generation_of(G):
                raise AssertionError("a commit accepted from outside the current generation")
            if self.gc.state_of(G) not in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
                raise AssertionError(f"a commit accepted in {self.gc.state_of(G)}")

    def check(self) -> None:
        gc = self.gc
        members = gc.member_ids(G)
        state = gc.state_of(G)
        # Empty has no members; a group without members is Empty, or waits in PreparingRebalance
        # for its join phase to end (the initial delay, or a member id handed out still pending).
        if (state is GroupState.EMPTY and members) or (not members and state in (
                GroupState.STABLE, GroupState.COMPLETING_REBALANCE)):
            raise AssertionError(f"state {state} with members {members}")
        leader = gc.leader_of(G)
        if members and leader not in members:
            raise AssertionError(f"leader {leader} is not among {members}")
        description = gc.describe(G)
        if description is not None:
            instances = [m.group_instance_id for m in description.members if m.group_instance_id is not None]
            if len(instances) != len(set(instances)):
                raise AssertionError(f"one instance id held by two members: {instances}")
            if state is GroupState.STABLE:
                sent = self.assignments.get(gc.generation_of(G))
                if sent is not None:
                    for m in description.members:
                        if not _holds(m.assignment, sent, member_id=m.member_id, instance=m.group_instance_id):
                            raise AssertionError("a Stable member holds an assignment the leader did not send")
        deadline = gc.next_deadline_ms()
        if state in (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE) and deadline is None:
            raise AssertionError(f"{state} with no deadline: the group could be stuck")


def _holds(assignment: bytes, sent: dict[str, bytes], *, member_id: str, instance: str | None) -> bool:
    """The assignment the leader sent for this member; a static member keeps the one its
    instance had under its previous member id (the leader named that id)."""
    if instance is None or member_id in sent:
        return assignment == sent.get(member_id, b"")
    return assignment in sent.values() and assignment.decode().split(":", 1)[1].startswith(f"{instance}-")


def run(seed: int, *, steps: int = 250) -> World:
    rng = random.Random(seed)
    world = World(rng=rng)
    clients = [Client(name=f"c{i}", instance=f"pod-{i}" if i % 2 else None) for i in range(rng.randint(1, 4))]
    for _ in range(steps):
        if rng.random() < 0.3:
            world.now_ms += rng.choice((1, 500, 2000, 4000, 12_000))
            world.deliver(world.gc.tick(now_ms=world.now_ms))
        else:
            world.act(rng.choice(clients))
        world.check()
    return world


def settle(world: World, clients_alive: list[Client]) -> None:
    """Every live client follows the protocol, heartbeating every 1 s, for 2 minutes."""
    for _ in range(120):
        world.now_ms += 1000
        world.deliver(world.gc.tick(now_ms=world.now_ms))
        for client in clients_alive:
            if client.phase in ("idle", "stable"):
                before = client.phase
                if before == "idle":
                    world.join(client)
                else:
                    error = world.gc.heartbeat(group_id=G, member_id=client.member_id,
                                               group_instance_id=client.instance, generation=client.generation,
                                               now_ms=world.now_ms)
                    if error == ErrorCode.rebalance_in_progress:
                        client.phase = "idle"
                    elif error != ErrorCode.none:
                        world.reset(client, error)
        world.check()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_simulated_consumers_keep_the_protocols_invariants(seed: int) -> None:
    run(seed)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(min_value=0, max_value=2**32))
def test_after_any_history_the_live_consumers_converge_to_one_stable_generation(seed: int) -> None:
    world = run(seed, steps=150)
    rng = random.Random(seed + 1)
    clients = {c.name: c for c in world.waiting.values()}
    alive = [Client(name=f"late{i}", instance=None) for i in range(rng.randint(1, 3))]
    del clients
    settle(world, alive)
    members = set(world.gc.member_ids(G))
    assert world.gc.state_of(G) is GroupState.STABLE
    assert members == {c.member_id for c in alive}
    assert {c.phase for c in alive} == {"stable"} and {c.generation for c in alive} == {world.gc.generation_of(G)}


def test_a_broken_generation_check_is_caught() -> None:
    """The simulation catches a coordinator that accepts commits from an old generation."""
    original = GroupCoordinator.validate_commit

    def lax(self: GroupCoordinator, **kwargs: object) -> ErrorCode:
        error = original(self, **kwargs)  # type: ignore[arg-type]
        return ErrorCode.none if error == ErrorCode.illegal_generation else error

    GroupCoordinator.validate_commit = lax  # type: ignore[method-assign]
    try:
        failures = 0
        for seed in range(200):
            try:
                world = run(seed, steps=200)
                # A client of the previous generation commits after a rebalance.
                stale = Client(name="stale", instance=None)
                members = world.gc.member_ids(G)
                if members and world.gc.generation_of(G) > 1:
                    stale.member_id, stale.generation = members[0], world.gc.generation_of(G) - 1
                    world.commit(stale)
            except AssertionError:
                failures += 1
        assert failures > 0
    finally:
        GroupCoordinator.validate_commit = original  # type: ignore[method-assign]


@pytest.mark.parametrize("seed", range(5))
def test_the_simulation_rebalances_many_times(seed: int) -> None:
    """The simulation exercises the protocol: generations do advance (it is not vacuous)."""
    world = run(seed, steps=400)
    assert world.last_generation >= 2
