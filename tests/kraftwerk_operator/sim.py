"""A seeded simulation of the operator: the real planner against a simulated cluster.

The cluster has nodes (processes with a started revision, volumes, a stored config), a KRaft
quorum (voters that are caught up or lagging, a leader elected among a running majority), brokers
(registered, fenced while they catch up) and partitions (replicas, an ISR that loses a broker when
it stops and takes it back once it has caught up, each topic's min.insync.replicas). Time moves
in ticks of one second; a started node needs some ticks to recover (log recovery, catch-up,
registration), a slow one many.

The checks are the operator's promises, judged on the simulated ground truth (not on what the
operator was told) at the moment the operator acts, and recorded in `violations`:
- never two nodes down because of the operator: it restarts a node only when every node it
  restarted before has recovered;
- a running, caught-up broker is restarted only while URP is 0 and no partition it is in the ISR
  of would drop below min.insync.replicas;
- a running, caught-up controller is restarted only while the other caught-up voters are a
  majority;
- order: controllers (followers, then the active one) before brokers;
- a reassignment starts only under its throttle (each moved partition's sources and added
  replicas listed on its topic, the rate on every broker involved), and a drained broker stops
  only once no throttle is left (`throttled`: the spec asks for one).
`Scenario` drives a roll with faults at exact points (the operator dying before acting or after
acting but before its status write, a second voter failing mid-roll, a broker that re-registers
slowly, a broker dead before the roll, a partition held at min ISR until a user fixes its topic)
and checks, once the faults are over, that the roll finishes.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field

from kraft_operator.config_rules import EngineConfigRules
from kraft_operator.model import MANUAL_ROLL_ANNOTATION, ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.plan import (
    ROLL_OPERATION,
    THROTTLE_BROKER_KEYS,
    Action,
    AddVoter,
    BrokerFacts,
    ClearReassignmentThrottles,
    ClusterFacts,
    FinalizeMetadataVersion,
    FormatJobFacts,
    FormatStorage,
    JobPhase,
    LogDirFacts,
    NodeFacts,
    Observed,
    PartitionDetail,
    PartitionFacts,
    Plan,
    PodPhase,
    QuorumBootstrap,
    QuorumFacts,
    ReassignPartitions,
    RemoveVoter,
    ReplaceVolume,
    ReplicaFacts,
    RestartNode,
    SetReassignmentThrottles,
    StartNode,
    StopNode,
    ThrottleFacts,
    UnregisterBroker,
    VolumeFacts,
    WriteConfig,
    desired_nodes,
    node_revision,
    plan,
    render_config,
    replication_factors,
    revision_change,
)

from .builders import WITH_BROKERS, FixedLayout, cluster_from


class CachedRules:
    """The engine's config rules, remembered per input: they are pure, and parsing every node's
    server.properties on every reconcile is most of a simulated reconcile's time."""

    def __init__(self) -> None:
        self._rules = EngineConfigRules()
        self._nodes: dict[frozenset[tuple[str, str]], str | None] = {}
        self._overrides: dict[tuple[str, str], str | None] = {}

    def override_problem(self, key: str, value: str) -> str | None:
        if (key, value) not in self._overrides:
            self._overrides[(key, value)] = self._rules.override_problem(key, value)
        return self._overrides[(key, value)]

    def node_problem(self, properties: Mapping[str, str]) -> str | None:
        key = frozenset(properties.items())
        if key not in self._nodes:
            self._nodes[key] = self._rules.node_problem(properties)
        return self._nodes[key]


RULES = CachedRules()
LAYOUT = FixedLayout()
TICK_MS = 1000
START_MS = 1_700_000_000_000



@dataclass
class SimNode:
    node_id: int
    pool: str
    roles: frozenset[str] = frozenset()
    config: dict[str, str] | None = None
    volumes: dict[int, VolumeFacts] = field(default_factory=dict)
    running: bool = False
    failed: bool = False
    revision: str | None = None
    recover_left: int = 0  # ticks until caught up / registered and unfenced
    caught_up_at_ms: int = -1
    registered: bool = False
    disrupted: bool = False  # down because the operator restarted it, until it has recovered
    crash_on_start: int = 0  # the next starts crash at once (a crash-looping pod)
    slow_next: int = 0  # extra recovery ticks for the next start (a slow re-registration)
    restart_requested: bool = False
    started_at_ms: int = -1
    removed: bool = False  # stopped for good by a scale-down
    supported: tuple[int, int] = (7, 27)  # metadata.version levels it runs (3.3-IV3 .. 4.1-IV1)
    lost_volumes: set[int] = field(default_factory=set)  # failed log directories: their replicas are offline

    @property
    def controller(self) -> bool:
        return "controller" in self.roles

    @property
    def broker(self) -> bool:
        return "broker" in self.roles

    @property
    def up(self) -> bool:
        return self.running and self.recover_left == 0


@dataclass
class SimPartition:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    isr: list[int]
    min_isr: int
    target: tuple[int, ...] | None = None  # a reassignment in flight: the replicas it ends with
    move_left: int = 0  # ticks until the adding replicas have caught up


@dataclass
class SimCluster:
    rng: random.Random
    now_ms: int = START_MS
    nodes: dict[int, SimNode] = field(default_factory=dict)
    jobs: dict[int, FormatJobFacts] = field(default_factory=dict)
    voters: tuple[int, ...] = ()
    leader: int = -1
    epoch: int = 0
    partitions: list[SimPartition] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    restarts: list[tuple[int, bool]] = field(default_factory=list)  # (node, was up) per RestartNode
    revision_target: dict[int, str] = field(default_factory=dict)
    voter_changes: list[int] = field(default_factory=list)  # controllers added by AddRaftVoter, in order
    removals: list[int] = field(default_factory=list)  # voters removed by RemoveRaftVoter, in order
    voter_dirs: dict[int, str] = field(default_factory=dict)  # each voter's directory id (its ReplicaKey)
    removed_leaders: list[int] = field(default_factory=list)  # of those, the ones that led when removed
    finalized: str = "4.1-IV1"
    bumps: list[str] = field(default_factory=list)
    upgraded_support: tuple[int, int] | None = None  # what a node restarted on a new revision supports
    replacements: list[tuple[int, int]] = field(default_factory=list)  # (node, volume) per ReplaceVolume
    throttled: bool = True  # the spec asks for a reassignment throttle (its default)
    broker_rates: dict[int, dict[str, str]] = field(default_factory=dict)  # dynamic broker configs set
    topic_throttles: dict[str, dict[str, str]] = field(default_factory=dict)  # topic -> throttled replicas set
    throttle_sets: int = 0

    # -- the runtime ---------------------------------------------------------------------------
    def apply(self, action: Action | AddVoter | RemoveVoter | ReassignPartitions | UnregisterBroker
              | FinalizeMetadataVersion | SetReassignmentThrottles | ClearReassignmentThrottles) -> None:
        if isinstance(action, SetReassignmentThrottles):
            self.throttle_sets += 1
            for topic, leaders, followers in action.topics:
                found = self.topic_throttles.setdefault(topic, {})
                found.update({k: v for k, v in (("leader.replication.throttled.replicas", leaders),
                                                ("follower.replication.throttled.replicas", followers)) if v})
            for broker in action.brokers:
                self.broker_rates[broker] = dict.fromkeys(THROTTLE_BROKER_KEYS, str(action.rate_bytes_per_second))
            return
        if isinstance(action, ClearReassignmentThrottles):
            for topic in action.topics:
                self.topic_throttles.pop(topic, None)
            for broker in action.brokers:
                self.broker_rates.pop(broker, None)
            return
        if isinstance(action, FinalizeMetadataVersion):
            self._check_finalize(action)
            self.finalized = action.version
            self.bumps.append(action.version)
            return
        node_id = action.node.node_id
        node = self.nodes.setdefault(node_id, SimNode(node_id, action.node.pool))
        if isinstance(action, WriteConfig):
            node.config = action.as_dict()
            node.roles = frozenset(r.value for r in action.roles)
        elif isinstance(action, FormatStorage):
            wrote = {}
            for path in action.directories:
                volume_id = int(path.rsplit("/", 1)[1])
                existing = node.volumes.get(volume_id)
                if existing is not None and existing.formatted and not action.ignore_formatted:
                    self.violations.append(f"formatted node {node_id}'s formatted volume {volume_id} again")
                if (existing is None or not existing.formatted) and node.running and node.broker and any(
                        v == volume_id for n, v in self.replacements if n == node_id):
                    self.violations.append(f"formatted broker {node_id}'s replaced volume {volume_id} while it runs")
                if existing is None or not existing.formatted:
                    directory = f"{self.rng.getrandbits(64):022x}"[:22]
                    if action.bootstrap is QuorumBootstrap.INITIAL and volume_id == 0 and action.initial_controllers:
                        # --initial-controllers names each initial voter's metadata directory id
                        entry = next(e for e in action.initial_controllers.split(",") if e.startswith(f"{node_id}@"))
                        directory = entry.rsplit(":", 1)[1]
                    node.volumes[volume_id] = VolumeFacts(volume_id, path, action.cluster_id, node_id, directory)
                    wrote[path] = directory
            self.jobs[node_id] = FormatJobFacts(node_id, JobPhase.SUCCEEDED, "", wrote)
        elif isinstance(action, StartNode):
            if not node.running:
                self._start(node, revision=action.revision)
        elif isinstance(action, AddVoter):
            self._check_add_voter(node)
            if node_id not in self.voters:
                self.voters = (*self.voters, node_id)
                self.voter_dirs[node_id] = action.directory_id
                self.voter_changes.append(node_id)
        elif isinstance(action, RemoveVoter):
            self._remove_voter(node, action.directory_id)
        elif isinstance(action, ReassignPartitions):
            self._reassign(node, action)
        elif isinstance(action, StopNode):
            self._check_stop(node)
            self._stop(node)
            node.failed, node.removed, node.disrupted = False, True, False
        elif isinstance(action, UnregisterBroker):
            if node.running:
                self.violations.append(f"UnregisterBroker for broker {node_id} while it runs")
            node.registered = False
        elif isinstance(action, ReplaceVolume):
            self._check_replace(node, action)
            self.replacements.append((node_id, action.volume_id))
            node.disrupted = node.up
            self._stop(node)
            node.failed = False
            node.volumes[action.volume_id] = VolumeFacts(action.volume_id, action.path)  # new and empty
            node.lost_volumes.discard(action.volume_id)
        elif isinstance(action, RestartNode):
            self._check_restart(node)
            self.restarts.append((node_id, node.up))
            node.disrupted = node.up
            self._stop(node)
            self._start(node, revision=action.revision)

    def _check_finalize(self, action: FinalizeMetadataVersion) -> None:
        """Never in the middle of a roll (every node up on its target revision), and only a level
        every node supports."""
        behind = [n.node_id for n in self.nodes.values() if not n.up or self._needs_roll(n.node_id)]
        if behind:
            self.violations.append(f"metadata.version {action.version} finalized while nodes {behind} are not rolled and up")
        unsupported = [n.node_id for n in self.nodes.values() if not n.supported[0] <= action.level <= n.supported[1]]
        if unsupported:
            self.violations.append(f"metadata.version {action.version} finalized; nodes {unsupported} do not support it")

    def _check_add_voter(self, node: SimNode) -> None:
        """KIP-853's rule: only a caught-up observer joins, and only while every voter is caught up
        (the majority grows with it)."""
        if not node.up:
            self.violations.append(f"AddRaftVoter for controller {node.node_id} before it caught up")
        lagging = [v for v in self.voters if not self.voting(v)]
        if lagging:
            self.violations.append(f"AddRaftVoter for controller {node.node_id} while voters {lagging} lag")

    def _remove_voter(self, node: SimNode, directory_id: str) -> None:
        """KIP-853's rule for a removal, judged on the ground truth: the voters that stay must have
        a caught-up majority of their own (they commit the change and everything after it). A
        leader that removes itself resigns once the removal commits (modelled at once)."""
        if node.node_id not in self.voters or self.voter_dirs.get(node.node_id, directory_id) != directory_id:
            return  # an earlier send already removed it: the controller answers VOTER_NOT_FOUND
        self.voter_dirs.pop(node.node_id, None)
        staying = [v for v in self.voters if v != node.node_id]
        up = [v for v in staying if self.voting(v)]
        if not staying or len(up) < len(staying) // 2 + 1:
            self.violations.append(f"RemoveRaftVoter {node.node_id} left voters {staying} with only {up} caught up")
        self.voters = tuple(staying)
        self.removals.append(node.node_id)
        if self.leader == node.node_id:
            self.removed_leaders.append(node.node_id)
            self.leader = -1
            self._elect()

    def _reassign(self, node: SimNode, action: ReassignPartitions) -> None:
        """A drain's reassignment: the same replication factor, without the leaving broker, onto
        brokers that exist; the adding replicas join the replicas at once and the ISR once caught up."""
        by_key = {(p.topic, p.partition): p for p in self.partitions}
        for move in action.moves:
            p = by_key[(move.topic, move.partition)]
            if p.target is not None and p.target != move.replicas:
                self.violations.append(f"a second reassignment of {p.topic}-{p.partition} to {move.replicas} "
                                       f"while one to {p.target} is in flight")
            if (action.drain and node.node_id in move.replicas) or len(set(move.replicas)) != len(p.target or p.replicas):
                self.violations.append(f"reassignment of {p.topic}-{p.partition} to {move.replicas} "
                                       f"(replicas {p.replicas}) keeps broker {node.node_id} or changes the RF")
            missing = [r for r in move.replicas if r not in self.nodes or not self.nodes[r].broker]
            if missing:
                self.violations.append(f"reassignment of {p.topic}-{p.partition} onto non-brokers {missing}")
            if p.target == move.replicas:
                continue  # sent again: nothing changes
            if self.throttled:
                self._check_throttled(p, move.replicas)
            p.target = move.replicas
            p.replicas = tuple(dict.fromkeys((*move.replicas, *p.replicas)))
            p.move_left = self.rng.randint(1, 4)

    def _check_throttled(self, p: SimPartition, target: tuple[int, ...]) -> None:
        """Kafka's throttle for the move, in force before it starts: the sources on the leader side,
        the added replicas on the follower side, the rate on every broker involved."""
        found = self.topic_throttles.get(p.topic, {})
        leaders = set(found.get("leader.replication.throttled.replicas", "").split(","))
        followers = set(found.get("follower.replication.throttled.replicas", "").split(","))
        missing = [f"{p.partition}:{b}" for b in p.replicas if f"{p.partition}:{b}" not in leaders]
        missing += [f"{p.partition}:{b}" for b in target if b not in p.replicas and f"{p.partition}:{b}" not in followers]
        unrated = [b for b in {*p.replicas, *target} if b not in self.broker_rates]
        if missing or unrated:
            self.violations.append(f"reassignment of {p.topic}-{p.partition} to {list(target)} started unthrottled "
                                   f"(replicas {missing} not throttled, brokers {unrated} without a rate)")

    def _check_stop(self, node: SimNode) -> None:
        """A leaving node stops only once it holds no vote and no replica, and (a broker) once the
        throttle of its drain is removed."""
        if node.broker and (self.broker_rates or self.topic_throttles):
            self.violations.append(f"stopped broker {node.node_id} with reassignment throttles left: "
                                   f"{self.broker_rates} {self.topic_throttles}")
        if node.node_id in self.voters:
            self.violations.append(f"stopped node {node.node_id} while it is a voter")
        held = [f"{p.topic}-{p.partition}" for p in self.partitions if node.node_id in p.replicas]
        if held:
            self.violations.append(f"stopped node {node.node_id} while it holds replicas of {held}")

    def _check_replace(self, node: SimNode, action: ReplaceVolume) -> None:
        """A lost volume's replacement stops the broker: only for a volume that is lost, and, unless
        the broker is down already, only while no partition it is in the ISR of drops below min ISR
        and no other replica is missing."""
        existing = node.volumes.get(action.volume_id)
        if action.volume_id not in node.lost_volumes and existing is not None and existing.formatted:
            # (Replacing the new, still empty volume again is harmless: an operator that died
            # after sending ReplaceVolume resends it.)
            self.violations.append(f"replaced broker {node.node_id}'s formatted volume {action.volume_id}, "
                                   "which was not lost")
        others = [n.node_id for n in self.nodes.values() if n.disrupted and n is not node]
        if others:
            self.violations.append(f"replaced a volume of node {node.node_id} while node(s) {others} are still down")
        if not node.up:
            return
        for p in self.partitions:
            if node.node_id in p.isr and len(p.isr) - 1 < p.min_isr:
                self.violations.append(f"stopped broker {node.node_id} for its volume: {p.topic}-{p.partition} ISR "
                                       f"{p.isr} drops below min ISR {p.min_isr}")
            missing = set(p.replicas) - set(p.isr) - {node.node_id}
            if missing:
                self.violations.append(f"stopped broker {node.node_id} for its volume while {p.topic}-{p.partition} "
                                       f"misses replica(s) {sorted(missing)}")

    def _check_restart(self, node: SimNode) -> None:
        """The operator's promises, judged on the ground truth as it acts."""
        others = [n.node_id for n in self.nodes.values() if n.disrupted and n is not node]
        if others:
            self.violations.append(f"restarted node {node.node_id} while node(s) {others} it restarted are still down")
        if not node.up:
            return  # already down: restarting it cannot reduce availability
        if node.broker:
            urp = [p for p in self.partitions if len(p.isr) < len(p.replicas)]
            if urp:
                self.violations.append(f"restarted broker {node.node_id} with URP {len(urp)}")
            for p in self.partitions:
                if node.node_id in p.isr and len(p.isr) - 1 < p.min_isr:
                    self.violations.append(
                        f"restarted broker {node.node_id}: {p.topic}-{p.partition} ISR {p.isr} drops below min ISR {p.min_isr}"
                    )
        if node.controller:
            others_up = [v for v in self.voters if v != node.node_id and self.voting(v)]
            if len(others_up) < len(self.voters) // 2 + 1:
                self.violations.append(
                    f"restarted controller {node.node_id} with only {others_up} of voters {list(self.voters)} caught up"
                )
            if self.leader == node.node_id:
                waiting = [v for v in self.voters if v != node.node_id and self._needs_roll(v) and self.nodes[v].up]
                if waiting:
                    self.violations.append(f"restarted the active controller {node.node_id} before followers {waiting}")
        if node.broker and not node.controller:
            pending = [n.node_id for n in self.nodes.values() if n.controller and self._needs_roll(n.node_id) and n.up]
            if pending:
                self.violations.append(f"restarted broker {node.node_id} before controllers {pending}")

    def _needs_roll(self, node_id: int) -> bool:
        target = self.revision_target.get(node_id)
        revision = self.nodes[node_id].revision
        return target is not None and (revision is None or revision_change(revision, target) is not None)

    def _start(self, node: SimNode, *, revision: str) -> None:
        if self.upgraded_support is not None and revision and revision != node.revision:
            node.supported = self.upgraded_support  # the new version runs newer levels
        node.revision = revision or node.revision
        node.restart_requested = False
        directories = len(node.config.get("log.dirs", "").split(",")) if node.config is not None else 0
        formatted = [v for v in node.volumes.values() if v.formatted]
        if node.config is None or not node.volumes or len(formatted) < directories:
            node.failed = True  # a log directory without meta.properties: the node refuses to start
            return
        if node.crash_on_start > 0:
            node.crash_on_start -= 1
            node.running, node.failed = False, True
            return
        node.running, node.failed = True, False
        node.started_at_ms = self.now_ms
        node.recover_left = self.rng.randint(1, 3) + node.slow_next
        node.slow_next = 0

    def _stop(self, node: SimNode) -> None:
        node.running = False
        node.recover_left = 0
        self._leave(node)

    def _leave(self, node: SimNode) -> None:
        if node.broker:
            for p in self.partitions:
                if node.node_id in p.isr and len(p.isr) > 1:
                    p.isr.remove(node.node_id)
        if node.node_id == self.leader:
            self.leader = -1

    # -- the voters' disks -----------------------------------------------------------------------
    def disk(self, node_id: int) -> str | None:
        """The directory id of the node's metadata volume, None while it has none."""
        volume = self.nodes[node_id].volumes.get(0) if node_id in self.nodes else None
        return volume.directory_id if volume is not None else None

    def same_disk(self, node_id: int) -> bool:
        """A voter votes and counts only with the disk its ReplicaKey names: on a new disk it is an
        observer until the voter set is swapped."""
        return node_id not in self.voter_dirs or self.disk(node_id) == self.voter_dirs[node_id]

    def voting(self, node_id: int) -> bool:
        return self.nodes[node_id].up and self.same_disk(node_id)

    # -- faults --------------------------------------------------------------------------------
    def lose_disk(self, node_id: int) -> None:
        """The node's metadata volume is gone (a new, empty one in its place): it crashes, and cannot
        start until the volume is formatted again."""
        self.crash(node_id)
        self.nodes[node_id].volumes.pop(0, None)
        self.jobs.pop(node_id, None)

    @staticmethod
    def replica_volume(p: SimPartition) -> int:
        """Which of a JBOD broker's two volumes holds its replica of `p`."""
        return p.partition % 2

    def lose_volume(self, node_id: int, volume_id: int, *, keep_files: bool = False) -> None:
        """One of a broker's volumes fails (a dead disk): the broker takes it offline and leaves the
        ISR of the replicas on it; losing volume 0, the metadata log's, halts the broker. With
        `keep_files` the volume is still there, formatted (an I/O error, not a vanished disk): only
        the broker's DescribeLogDirs tells (KAFKA_STORAGE_ERROR)."""
        node = self.nodes[node_id]
        if not keep_files:
            node.volumes.pop(volume_id, None)
        node.lost_volumes.add(volume_id)
        for p in self.partitions:
            if self.replica_volume(p) == volume_id and node_id in p.isr and len(p.isr) > 1:
                p.isr.remove(node_id)
        if volume_id == 0:
            self.crash(node_id)

    def crash(self, node_id: int, *, crash_loops: int = 0) -> None:
        node = self.nodes.get(node_id)
        if node is None or not node.running:
            return
        node.running, node.failed, node.recover_left = False, True, 0
        node.crash_on_start = crash_loops
        node.disrupted = False  # down because of the fault now, not because of the operator
        self._leave(node)

    # -- time ----------------------------------------------------------------------------------
    def tick(self) -> None:
        self.now_ms += TICK_MS
        quorum = self._has_majority()
        for node in sorted(self.nodes.values(), key=lambda n: n.node_id):
            if not node.running:
                continue
            if node.recover_left > 0 and (quorum or node.controller):
                node.recover_left -= 1
            if node.up:
                node.disrupted = False
                if node.controller and self.same_disk(node.node_id):
                    node.caught_up_at_ms = self.now_ms
                if node.broker and self.leader >= 0:
                    node.registered = True
                    for p in self.partitions:
                        if node.node_id in p.replicas and node.node_id not in p.isr and (
                                p.target is None or node.node_id not in p.target or p.move_left == 0) and (
                                self.replica_volume(p) not in node.lost_volumes):
                            p.isr.append(node.node_id)
        self._move_partitions()
        self._elect()

    def _move_partitions(self) -> None:
        """Reassignments progress while the controller has a leader: the adding replicas catch up,
        then the replicas become the target and the removed ones leave the ISR."""
        if self.leader < 0:
            return
        for p in self.partitions:
            if p.target is None:
                continue
            adding = [r for r in p.target if r not in p.isr]
            if p.move_left > 0:
                p.move_left -= 1
                continue
            if any(not self.nodes[r].up for r in adding):
                continue  # an adding replica is down: the reassignment waits for it
            p.isr.extend(adding)
            p.replicas = p.target
            p.isr = [r for r in p.isr if r in p.target] or [p.target[0]]
            p.target = None

    def _has_majority(self) -> bool:
        running = [v for v in self.voters if self.nodes[v].running and self.same_disk(v)]
        return bool(self.voters) and len(running) >= len(self.voters) // 2 + 1

    def _elect(self) -> None:
        up = [v for v in self.voters if self.voting(v)]
        if self.leader >= 0 and self.nodes[self.leader].up and self._has_majority():
            return
        if up and len(up) >= len(self.voters) // 2 + 1:
            self.leader = self.rng.choice(up)
            self.epoch += 1
        else:
            self.leader = -1

    def create_topics(self, *, count: int, partitions: int, min_isr: int) -> None:
        brokers = sorted(n.node_id for n in self.nodes.values() if n.broker)
        rf = min(3, len(brokers))
        for t in range(count):
            for p in range(partitions):
                start = (t + p) % len(brokers)
                replicas = tuple(brokers[(start + i) % len(brokers)] for i in range(rf))
                isr = [r for r in replicas if self.nodes[r].up]
                self.partitions.append(SimPartition(f"topic-{t}", p, replicas, isr or [replicas[0]], min(min_isr, rf)))

    # -- observation ---------------------------------------------------------------------------
    def observe(self, cluster: KRaftCluster) -> Observed:
        if not self.voters and cluster.status is not None and cluster.status.initial_controllers:
            entries = cluster.status.initial_controllers.split(",")
            self.voters = tuple(int(e.split("@")[0]) for e in entries)
            self.voter_dirs = {int(e.split("@")[0]): e.rsplit(":", 1)[1] for e in entries}
        facts = {
            n.node_id: NodeFacts(
                node_id=n.node_id,
                pool=n.pool,
                phase=PodPhase.RUNNING if n.running else PodPhase.FAILED if n.failed else PodPhase.ABSENT,
                volumes=tuple(v for _, v in sorted(n.volumes.items())),
                config=dict(n.config) if n.config is not None else None,
                ready=n.running,
                started_revision=n.revision if n.running else None,
                restart_requested=n.restart_requested,
                started_at_ms=n.started_at_ms if n.running else None,
            )
            for n in self.nodes.values()
        }
        return Observed(nodes=facts, format_jobs=dict(self.jobs), cluster=self._cluster_facts())

    def _cluster_facts(self) -> ClusterFacts:
        if self.leader < 0:
            return ClusterFacts(errors=("DescribeQuorum: no leader",))
        leader_end = 1000
        voters = []
        for v in self.voters:
            node = self.nodes[v]
            lag = 0 if self.voting(v) else 50 * max(1, node.recover_left)
            voters.append(ReplicaFacts(v, self.voter_dirs.get(v, f"dir{v}"), leader_end - lag, node.caught_up_at_ms))
        observers = tuple(
            ReplicaFacts(n.node_id, self.disk(n.node_id) or f"dir{n.node_id}", leader_end, self.now_ms)
            for n in self.nodes.values()
            if n.running and (n.node_id not in self.voters or not self.same_disk(n.node_id)) and (n.up or not n.controller)
        )
        running_brokers = [n for n in self.nodes.values() if n.broker and n.running]
        brokers = None
        details = None
        counts = None
        if running_brokers:
            brokers = {
                n.node_id: BrokerFacts(n.node_id, fenced=not n.up)
                for n in self.nodes.values() if n.broker and n.registered
            }
            details = tuple(
                PartitionDetail(p.topic, p.partition, p.isr[0] if self.nodes[p.isr[0]].up else -1, p.replicas,
                                tuple(p.isr), p.min_isr)
                for p in self.partitions
            )
            counts = PartitionFacts(
                total=len(details),
                under_replicated=sum(1 for p in details if len(p.isr) < len(p.replicas)),
                under_min_isr=sum(1 for p in details if len(p.isr) < p.min_isr),
                offline=sum(1 for p in details if p.leader_id < 0),
                max_replication_factor=max(replication_factors(details).values(), default=0),
            )
        return ClusterFacts(
            cluster_id="sim",
            quorum=QuorumFacts(self.leader, self.epoch, leader_end, tuple(voters), observers),
            brokers=brokers,
            partitions=counts,
            finalized_metadata_version=self.finalized,
            partition_details=details,
            supported_metadata_versions={n.node_id: n.supported for n in self.nodes.values() if n.running},
            log_dirs={n.node_id: tuple(LogDirFacts(v.path, "KAFKA_STORAGE_ERROR" if i in n.lost_volumes else None)
                                       for i, v in sorted(n.volumes.items()))
                      for n in self.nodes.values() if n.broker and n.up},
            throttles=None if details is None else ThrottleFacts(
                broker_rates={b: dict(self.broker_rates.get(b, {})) for b in (brokers or {}) if self.nodes[b].up},
                topic_replicas={t: dict(v) for t, v in self.topic_throttles.items()}),
        )


def reconcile(cluster: KRaftCluster, sim: SimCluster, rng: random.Random) -> Plan:
    return plan(cluster, observed=sim.observe(cluster), layout=LAYOUT, rules=RULES, rng=rng, now_ms=sim.now_ms)


def publish(cluster: KRaftCluster, result: Plan) -> KRaftCluster:
    return cluster.model_copy(update={"status": result.status})


def ready(result: Plan) -> bool:
    condition = result.status.condition(ConditionType.READY)
    return condition is not None and condition.status is ConditionStatus.TRUE


def step(cluster: KRaftCluster, sim: SimCluster, rng: random.Random) -> tuple[KRaftCluster, Plan]:
    """One reconcile: plan, act, publish the status; then a tick of time."""
    result = reconcile(cluster, sim, rng)
    for action in result.actions:
        sim.apply(action)
    sim.tick()
    return publish(cluster, result), result


def operate(
    cluster: KRaftCluster, sim: SimCluster, result: Plan, *, tick: int, death: bool, before_act: bool, log: list[str]
) -> KRaftCluster:
    """Carry out one reconcile's plan as an operator would, or die at this tick: before acting, or
    after acting but before its status write. Then a tick of time; returns the published cluster."""
    if death and before_act:
        log.append(f"tick {tick}: operator died before acting")
        sim.tick()
        return cluster
    for action in result.actions:
        sim.apply(action)
    if death:
        log.append(f"tick {tick}: operator died after acting, before its status write")
    else:
        cluster = publish(cluster, result)
    operation = result.status.operation
    acted = [f"{type(a).__name__} {a.node.node_id if hasattr(a, 'node') else ''}" for a in result.actions]
    log.append(f"tick {tick}: {acted} {operation.name + '/' + operation.step if operation else '-'} "
               f"{result.waiting_for[:160]}")
    sim.tick()
    return cluster


def bootstrap(seed: int, *, topics: int = 3, min_isr: int = 2, brokers: int = 3) -> tuple[KRaftCluster, SimCluster]:
    """Three controllers and `brokers` brokers (JBOD) taken from nothing to Ready by the real
    planner, with topics created (replication factor 3)."""
    rng = random.Random(seed)
    sim = SimCluster(random.Random(seed + 1))
    cluster = scaled(cluster_from(WITH_BROKERS), brokers=brokers)
    for _ in range(40):
        cluster, result = step(cluster, sim, rng)
        if ready(result) and not result.actions and result.status.operation is None:
            break
    else:
        raise AssertionError(f"bootstrap did not reach Ready: {result.waiting_for}")
    sim.create_topics(count=topics, partitions=2, min_isr=min_isr)
    return cluster, sim


@dataclass
class Scenario:
    """One seeded roll with faults at exact points; `run` returns the violations and whether the
    roll finished once the faults were over."""

    seed: int
    manual: bool = False
    operator_deaths: int = 0
    second_voter_fails: bool = False
    slow_broker: bool = False
    dead_broker: bool = False
    held_at_min_isr: bool = False
    random_crashes: int = 0
    death_ticks: tuple[int, ...] | None = None  # exact reconciles at which the operator dies
    death_before_act: bool | None = None  # how it dies there (None: a coin decides)
    max_ticks: int = 400
    log: list[str] = field(default_factory=list)
    results: list[Plan] = field(default_factory=list)

    @classmethod
    def random(cls, seed: int) -> Scenario:
        r = random.Random(seed * 7919 + 1)
        return cls(
            seed=seed,
            manual=r.random() < 0.3,
            operator_deaths=r.choice([0, 0, 1, 2, 4]),
            second_voter_fails=r.random() < 0.3,
            slow_broker=r.random() < 0.3,
            dead_broker=r.random() < 0.25,
            held_at_min_isr=r.random() < 0.2,
            random_crashes=r.choice([0, 0, 0, 1, 2]),
        )

    def run(self) -> tuple[list[str], bool]:
        cluster, sim = bootstrap(self.seed)
        rng = random.Random(self.seed + 2)
        faults = random.Random(self.seed + 3)
        cluster = self._trigger(cluster)
        brokers = sorted(n.node_id for n in sim.nodes.values() if n.broker)
        controllers = sorted(n.node_id for n in sim.nodes.values() if n.controller)
        if self.dead_broker:
            sim.crash(faults.choice(brokers), crash_loops=faults.randint(0, 3))
        if self.slow_broker:
            sim.nodes[faults.choice(brokers)].slow_next = faults.randint(15, 40)
        held_until = faults.randint(20, 60) if self.held_at_min_isr else -1
        if self.held_at_min_isr:
            sim.partitions[0].min_isr = len(sim.partitions[0].replicas)
        deaths = sorted(faults.sample(range(1, 60), self.operator_deaths))
        if self.death_ticks is not None:
            deaths = list(self.death_ticks)
        crash_ticks = sorted(faults.sample(range(1, 80), self.random_crashes))
        voter_failed = False
        quiet_from = max([held_until, *deaths, *crash_ticks, 0]) + 1
        finished = False
        for tick in range(self.max_ticks):
            if tick == held_until:
                sim.partitions[0].min_isr = 2  # the user fixes the topic
            if tick in crash_ticks:
                sim.crash(faults.choice(sorted(sim.nodes)), crash_loops=faults.randint(0, 2))
            if self.second_voter_fails and not voter_failed and any(sim.nodes[c].disrupted for c in controllers):
                others = [c for c in controllers if not sim.nodes[c].disrupted and sim.nodes[c].running]
                if others:
                    sim.crash(faults.choice(others), crash_loops=faults.randint(0, 2))
                    voter_failed = True
            result = reconcile(cluster, sim, rng)
            sim.revision_target = self._targets(sim, cluster, result)
            self.results.append(result)
            before = faults.random() < 0.5 if self.death_before_act is None else self.death_before_act
            cluster = operate(cluster, sim, result, tick=tick, death=tick in deaths, before_act=before, log=self.log)
            if tick > quiet_from and self._done(sim, result):
                finished = True
                break
        return sim.violations, finished

    def _trigger(self, cluster: KRaftCluster) -> KRaftCluster:
        if self.manual:
            meta = cluster.metadata.model_copy(update={"annotations": {MANUAL_ROLL_ANNOTATION: f"roll-{self.seed}"}})
            return cluster.model_copy(update={"metadata": meta})
        spec = cluster.spec.model_copy(update={"config": {"log.retention.hours": "24"}})
        return cluster.model_copy(update={"spec": spec})

    def _targets(self, sim: SimCluster, cluster: KRaftCluster, result: Plan) -> dict[int, str]:
        """What each node's revision must become: the one the planner starts new processes with."""
        if self.manual:
            return {}
        return sim.revision_target or target_revisions(cluster)  # the spec does not change during a run

    def _done(self, sim: SimCluster, result: Plan) -> bool:
        if not ready(result) or result.actions:
            return False
        if result.status.operation is not None and result.status.operation.name == ROLL_OPERATION:
            return False
        if self.manual:
            restarted = {node_id for node_id, _ in sim.restarts}
            return result.status.last_manual_roll == f"roll-{self.seed}" and restarted >= set(sim.nodes)
        return all(not sim._needs_roll(i) for i in sim.nodes)


def target_revisions(cluster: KRaftCluster) -> dict[int, str]:
    """Each desired node's revision under the cluster's spec (what a finished roll leaves running)."""
    nodes = desired_nodes(namespace="ns", cluster="demo", spec=cluster.spec, status=cluster.status)
    controllers = [n for n in nodes if n.is_controller]
    return {
        n.ref.node_id: node_revision(render_config(n, spec=cluster.spec, controllers=controllers, layout=LAYOUT),
                                     image=cluster.spec.image, version=cluster.spec.version)
        for n in nodes
    }


def scaled(cluster: KRaftCluster, *, controllers: int | None = None, brokers: int | None = None) -> KRaftCluster:
    """The cluster with its controller pool (the first) and broker pool (the second) resized."""
    pools = list(cluster.spec.node_pools)
    if controllers is not None:
        pools[0] = pools[0].model_copy(update={"replicas": controllers})
    if brokers is not None:
        pools[1] = pools[1].model_copy(update={"replicas": brokers})
    return cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})


@dataclass
class ScaleScenario:
    """Controllers 3 -> 5 -> 3 and brokers 4 -> 3 on one seed, with faults at exact points: the
    operator dying before acting or before its status write, a staying node crashing, the
    active controller being one of the leaving ones. `run` returns the violations and whether the
    cluster ended as the spec asks (voters, running nodes, registrations, replicas, status)."""

    seed: int
    operator_deaths: int = 0
    crashes: int = 0
    leaving_leader: bool = False
    death_ticks: tuple[int, ...] | None = None
    death_before_act: bool | None = None
    max_ticks: int = 500
    log: list[str] = field(default_factory=list)
    results: list[Plan] = field(default_factory=list)
    staying: set[int] = field(default_factory=set)
    leaving: list[int] = field(default_factory=list)
    sim: SimCluster | None = None
    delete_claims: bool = False  # the broker pool's second volume says deleteClaim: true
    throttle_bytes_per_second: int | None = 52428800  # spec.lifecycle.reassignmentThrottleBytesPerSecond

    @classmethod
    def random(cls, seed: int) -> ScaleScenario:
        r = random.Random(seed * 6007 + 5)
        return cls(seed=seed, operator_deaths=r.choice([0, 0, 1, 2, 4]), crashes=r.choice([0, 0, 1, 2]),
                   leaving_leader=r.random() < 0.5)

    def run(self) -> tuple[list[str], bool]:
        cluster, sim = bootstrap(self.seed, brokers=4)
        self.sim = sim
        sim.throttled = self.throttle_bytes_per_second is not None
        lifecycle = cluster.spec.lifecycle.model_copy(
            update={"reassignment_throttle_bytes_per_second": self.throttle_bytes_per_second})
        cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"lifecycle": lifecycle})})
        if self.delete_claims:
            pools = list(cluster.spec.node_pools)
            volumes = [v.model_copy(update={"delete_claim": v.id == 1}) for v in pools[1].storage.volumes]
            pools[1] = pools[1].model_copy(update={"storage": pools[1].storage.model_copy(update={"volumes": volumes})})
            cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"node_pools": pools})})
        rng = random.Random(self.seed + 2)
        faults = random.Random(self.seed + 3)
        cluster = scaled(cluster, controllers=5)
        for _ in range(200):
            cluster, result = step(cluster, sim, rng)
            if len(sim.voters) == 5 and result.status.operation is None and not result.actions and ready(result):
                break
        else:
            return [*sim.violations, f"3 -> 5 did not finish: {result.waiting_for}"], False
        self.staying = {0, 1, 2, 3, 4, 5}  # the lowest ids of each pool stay
        self.leaving = sorted(set(sim.nodes) - self.staying)  # broker 6 and controllers 7, 8
        if self.leaving_leader:
            sim.leader = max(sim.voters)  # the active controller is one of the two that leave
            sim.epoch += 1
        cluster = scaled(cluster, controllers=3, brokers=3)
        deaths = sorted(faults.sample(range(1, 80), self.operator_deaths))
        if self.death_ticks is not None:
            deaths = list(self.death_ticks)
        crash_ticks = sorted(faults.sample(range(1, 60), self.crashes))
        quiet_from = max([*deaths, *crash_ticks, 0]) + 1
        for tick in range(self.max_ticks):
            if tick in crash_ticks:
                sim.crash(faults.choice(sorted(self.staying)), crash_loops=faults.randint(0, 2))
            result = reconcile(cluster, sim, rng)
            self.results.append(result)
            before = faults.random() < 0.5 if self.death_before_act is None else self.death_before_act
            cluster = operate(cluster, sim, result, tick=tick, death=tick in deaths, before_act=before, log=self.log)
            if tick > quiet_from and self.done(sim, result):
                return sim.violations, True
        return sim.violations, False

    def done(self, sim: SimCluster, result: Plan) -> bool:
        if not ready(result) or result.actions or result.status.operation is not None:
            return False
        if set(sim.voters) != {0, 1, 2} or {n.id for n in result.status.nodes} != self.staying:
            return False
        leaving = [sim.nodes[i] for i in self.leaving]
        if any(n.running or n.registered for n in leaving) or sim.broker_rates or sim.topic_throttles:
            return False
        return not any(set(p.replicas) & set(self.leaving) for p in sim.partitions)
