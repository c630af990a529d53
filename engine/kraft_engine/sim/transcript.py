"""The transcript interpreter: step a small KRaft cluster by hand and print what happens.

Seeded simulations prove that invariants hold across millions of interleavings; transcripts
prove protocol details, one message at a time, in the etcd-raft style. A transcript drives the
same `SimCluster` (and so the same reference driver) as the simulations, but the network holds
every message until a `deliver` step releases it, and time only moves on `tick`/`campaign`.

Directives (ids are node ids; `ids` is a comma-separated list):

    add-nodes N [observers=M] [dynamic=true] [<RaftConfig field>=value ...]
    campaign ID                      fire ID's timers until it starts an election
    tick ms=N                        advance the clock by N ms, running every due timer
    run ms=N                         let N ms pass with a working network (instant delivery)
    deliver [from=ids] [to=ids] [drop=ids] [type=Name]   deliver pending messages (those to or
                                     from `drop` are lost); messages they cause stay pending
    stabilize                        deliver until no message is pending (time stands still)
    append ID|leader VALUE...        the leader's state machine appends counter values
    crash ID | restart ID | wipe ID  crash (unflushed log lost), restart, re-format
    shutdown ID                      graceful shutdown (the node stops when the core says so)
    partition IDS IDS ... | heal     cut links between groups | restore every link
    add-voter ID | remove-voter ID   AddRaftVoter / RemoveRaftVoter sent to the leader
    upgrade-kraft-version            the leader finalizes kraft.version 1
    describe-quorum [ID]             DescribeQuorum (kafka-metadata-quorum describe) to ID/leader
    status [IDS] | log ID | persisted ID | pending

Every step prints the messages it delivered and then how each node's role, epoch, leader,
vote and high watermark changed, so the expected output reads like the protocol trace.
"""

from __future__ import annotations

import dataclasses
import enum
import uuid
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from kraft_engine.raft import KRAFT_VERSION_1, RaftConfig, ReplicaKey, Role
from kraft_engine.raft import messages as raft_messages
from kraft_engine.records.log_batch import parse_batches
from kraft_engine.sim.cluster import ADMIN_ID, CLUSTER_ID, SimCluster, SimNode, endpoint_of
from kraft_engine.sim.datadriven import Directive, TranscriptError
from kraft_engine.sim.invariants import default_invariants
from kraft_engine.sim.network import Envelope, Network
from kraft_engine.sim.replicated_counter import ReplicatedCounter, encode_value
from kraft_engine.sim.scheduler import Scheduler

__all__ = ["TranscriptRunner", "summarize"]

# Fields that are the same in every KRaft message or carry no protocol meaning in a transcript.
_NOISE = frozenset(
    {
        "cluster_id", "topic_name", "topic_id", "partition_index", "partition", "throttle_time",
        "node_endpoints", "leader_endpoints", "endpoints", "listeners", "max_bytes", "min_bytes",
        "max_wait", "partition_max_bytes", "session_id", "session_epoch", "isolation_level",
        "rack_id", "forgotten_topics_data", "aborted_transactions", "last_stable_offset",
        "preferred_read_replica", "client_software_name", "client_software_version", "timeout",
        "api_keys", "supported_features", "finalized_features", "finalized_features_epoch",
    }
)


# KRaft RPCs address exactly one topic and partition: those wrappers are flattened away.
_SINGLE_PARTITION = frozenset({"topics", "partitions", "responses"})


def _records(data: bytes) -> str:
    parts = []
    for batch in parse_batches(data):
        if batch.is_control:
            what = "+".join(type(r).__name__.removesuffix("Record").removesuffix("Message") for r in batch.control_records)
        else:
            what = ",".join(str(int.from_bytes(v, "big", signed=True)) if len(v) == 4 else repr(v) for v in batch.records)
        parts.append(f"{batch.base_offset}-{batch.last_offset}@e{batch.epoch}:{what}")
    return "[" + " ".join(parts) + "]"


def _fields(entity: Any, out: list[str]) -> None:
    for f in dataclasses.fields(entity):
        if f.name in _NOISE or f.name.endswith("directory_id"):
            continue
        value = getattr(entity, f.name)
        if f.default is not dataclasses.MISSING and value == f.default and f.name != "pre_vote":
            continue
        if dataclasses.is_dataclass(value):
            inner: list[str] = []
            _fields(value, inner)
            if inner:
                out.append(f"{f.name}(" + " ".join(inner) + ")")
        elif isinstance(value, tuple) and value and all(dataclasses.is_dataclass(v) for v in value):
            if len(value) == 1 and f.name in _SINGLE_PARTITION:
                _fields(value[0], out)
            else:
                out.append(f"{f.name}=[" + "; ".join(summarize(v, name=False) for v in value) + "]")
        elif isinstance(value, tuple):
            if value:
                out.append(f"{f.name}={list(value)}")
        elif isinstance(value, bytes | bytearray):
            if value:
                out.append(f"records={_records(bytes(value))}")
        elif isinstance(value, ErrorCode):
            if value != ErrorCode.none:
                out.append(f"{f.name}={value.name}")
        elif isinstance(value, bool):
            out.append(f"{f.name}={str(value).lower()}")
        elif isinstance(value, enum.Enum):
            out.append(f"{f.name}={value.name}")
        elif isinstance(value, uuid.UUID) or value is None:
            continue
        else:
            out.append(f"{f.name}={value}")


def summarize(entity: Any, *, name: bool = True) -> str:
    """One line for a kio entity: its meaningful fields, nested single partitions flattened."""
    out: list[str] = []
    _fields(entity, out)
    head = [type(entity).__name__] if name else []
    return " ".join(head + out)


class _ManualNetwork(Network):
    """Holds every message until the transcript delivers it; cut links drop it on delivery."""

    def __init__(self, scheduler: Scheduler, deliver: Callable[[Envelope], None]) -> None:
        super().__init__(scheduler, deliver=deliver)
        self.pending: list[Envelope] = []

    def send(self, source: int, destination: int, payload: Any) -> None:
        self.stats.sent += 1
        self.pending.append(Envelope(source, destination, payload, self._scheduler.now_ms))


def _ids(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _node_state(node: SimNode) -> str:
    raft = node.raft
    voted = raft.voted_key
    parts = [
        raft.role.value,
        f"epoch={raft.epoch}",
        f"leader={raft.leader_id if raft.leader_id is not None else '-'}",
        f"voted={voted.id if voted is not None else '-'}",
        f"hwm={raft.high_watermark if raft.high_watermark is not None else '-'}",
        f"leo={raft.log_end_offset}",
    ]
    return " ".join(parts)


class TranscriptRunner:
    """Runs directives one by one; `run(directive) -> output` (what the transcript must show)."""

    def __init__(self, *, seed: int = 0) -> None:
        self.seed = seed
        self.cluster: SimCluster | None = None
        self.network: _ManualNetwork | None = None

    # -- plumbing ------------------------------------------------------------------------------
    def _need(self) -> tuple[SimCluster, _ManualNetwork]:
        if self.cluster is None or self.network is None:
            raise TranscriptError("no cluster yet: start with add-nodes")
        return self.cluster, self.network

    def _snapshot_states(self) -> dict[int, str]:
        cluster, _ = self._need()
        states = {}
        for node_id in cluster.all_ids:
            node = cluster.running.get(node_id)
            states[node_id] = "down" if node is None else _node_state(node)
        return states

    def _describe(self, envelope: Envelope) -> str:
        payload = envelope.payload
        source = "admin" if envelope.source == ADMIN_ID else str(envelope.source)
        target = "admin" if envelope.destination == ADMIN_ID else str(envelope.destination)
        failure = getattr(payload, "failure", None)
        if failure is not None:
            return f"{source}->{target} failure={failure.name}"
        entity_type = payload.entity_type
        data = payload.data
        if isinstance(data, bytes):
            from kio.serial import entity_reader

            entity, _ = entity_reader(entity_type)(data, 0)
        else:
            entity = data
        return f"{source}->{target} {summarize(entity)}"

    def _type_name(self, envelope: Envelope) -> str:
        entity_type = getattr(envelope.payload, "entity_type", None)
        return "" if entity_type is None else str(entity_type.__name__)

    def run(self, line: str) -> str:
        directive = Directive.parse(line)
        handler = getattr(self, "_do_" + directive.command.replace("-", "_"), None)
        if handler is None:
            raise TranscriptError(f"unknown directive {directive.command!r}")
        if directive.command == "add-nodes":
            return str(handler(directive))
        before = self._snapshot_states()
        lines: list[str] = list(handler(directive) or [])
        after = self._snapshot_states()
        for node_id, state in after.items():
            if before.get(node_id) != state:
                lines.append(f"> {node_id}: {before.get(node_id)} -> {state}")
        return "\n".join(lines)

    # -- directives ----------------------------------------------------------------------------
    def _do_add_nodes(self, d: Directive) -> str:
        if self.cluster is not None:
            raise TranscriptError("add-nodes may run once per transcript")
        voters = int(d.args[0])
        observers = int(d.options.pop("observers", "0"))
        dynamic = d.options.pop("dynamic", "false") == "true"
        overrides: dict[str, Any] = {}
        for key, value in d.options.items():
            fields = {f.name: f for f in dataclasses.fields(RaftConfig)}
            if key not in fields:
                raise TranscriptError(f"unknown RaftConfig field {key!r}")
            overrides[key] = value == "true" if value in ("true", "false") else int(value)
        scheduler = Scheduler(seed=self.seed)
        cluster = SimCluster(
            scheduler,
            voter_ids=range(1, voters + 1),
            observer_ids=range(voters + 1, voters + observers + 1),
            raft_config=RaftConfig(**overrides),
            invariants=default_invariants(),
            wire_format=True,
            dynamic=dynamic,
        )
        network = _ManualNetwork(scheduler, cluster._arrive)
        cluster.network = network
        self.cluster, self.network = cluster, network
        cluster.start_all()
        return "\n".join(f"{i}: {state}" for i, state in self._snapshot_states().items())

    def _do_status(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        ids = _ids(d.args[0]) if d.args else cluster.all_ids
        states = self._snapshot_states()
        lines = []
        for node_id in ids:
            node = cluster.running.get(node_id)
            extra = (
                ""
                if node is None
                else f" voters={sorted(node.raft.voters.ids)} kraft.version={node.raft.kraft_version} "
                f"committed={node.counter.committed if isinstance(node.counter, ReplicatedCounter) else '-'}"
            )
            lines.append(f"{node_id}: {states[node_id]}{extra}")
        return lines

    def _do_pending(self, d: Directive) -> list[str]:
        _, network = self._need()
        return [self._describe(e) for e in network.pending] or ["(none)"]

    def _do_tick(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        duration_ms = int(d.options.get("ms", "0"))
        cluster.scheduler.run_for(duration_ms)
        return [f"t={cluster.scheduler.now_ms}"]

    def _do_run(self, d: Directive) -> list[str]:
        """Let N ms pass with a working network: every message is delivered as soon as it is
        sent (cut links still drop it). Prints how many messages flowed, and admin answers."""
        cluster, network = self._need()
        scheduler = cluster.scheduler
        end_ms = scheduler.now_ms + int(d.options.get("ms", "0"))
        delivered = dropped = 0
        answers: list[str] = []
        while True:
            while network.pending:
                envelope = network.pending.pop(0)
                if network.rule(envelope.source, envelope.destination).cut:
                    dropped += 1
                    continue
                delivered += 1
                if envelope.destination == ADMIN_ID:
                    answers.append(self._describe(envelope))
                cluster._arrive(envelope)
                scheduler.verify()
            if not scheduler.pending or scheduler.next_deadline_ms() > end_ms:
                break
            scheduler.step()
        scheduler.now_ms = max(scheduler.now_ms, end_ms)
        return [f"t={scheduler.now_ms} delivered={delivered} cut={dropped}", *answers]

    def _do_campaign(self, d: Directive) -> list[str]:
        cluster, network = self._need()
        node = self._running(int(d.args[0]))
        scheduler = cluster.scheduler

        def asking() -> int:
            return sum(
                1 for e in network.pending if e.source == node.node_id and self._type_name(e) == "VoteRequest"
            )

        before = asking()
        for _ in range(100):
            if node.raft.role is Role.LEADER or asking() > before:
                break
            # Only this node's timers fire: it is the first whose election timeout expires.
            scheduler.now_ms = max(scheduler.now_ms, node.raft.next_deadline_ms(scheduler.now_ms))
            cluster._poll(node)
        else:
            raise TranscriptError(f"node {node.node_id} does not campaign")
        return [f"t={scheduler.now_ms}"]

    def _deliver(self, envelopes: list[Envelope], *, dropped: set[int]) -> list[str]:
        cluster, network = self._need()
        lines = []
        for envelope in envelopes:
            text = self._describe(envelope)
            if envelope.source in dropped or envelope.destination in dropped:
                lines.append(f"{text} (dropped)")
                continue
            if network.rule(envelope.source, envelope.destination).cut:
                lines.append(f"{text} (cut)")
                continue
            lines.append(text)
            cluster._arrive(envelope)
            cluster.scheduler.verify()
        return lines

    def _do_deliver(self, d: Directive) -> list[str]:
        _, network = self._need()
        sources = set(_ids(d.options["from"])) if "from" in d.options else None
        targets = set(_ids(d.options["to"])) if "to" in d.options else None
        wanted_type = d.options.get("type")
        chosen, kept = [], []
        for envelope in network.pending:
            if (
                (sources is None or envelope.source in sources)
                and (targets is None or envelope.destination in targets)
                and (wanted_type is None or self._type_name(envelope) == wanted_type)
            ):
                chosen.append(envelope)
            else:
                kept.append(envelope)
        network.pending = kept
        return self._deliver(chosen, dropped=set(_ids(d.options.get("drop", "")))) or ["(nothing to deliver)"]

    def _do_stabilize(self, d: Directive) -> list[str]:
        _, network = self._need()
        lines: list[str] = []
        for _ in range(1000):
            if not network.pending:
                return lines or ["(nothing to deliver)"]
            batch, network.pending = network.pending, []
            lines += self._deliver(batch, dropped=set())
        raise TranscriptError("messages did not stabilize")

    def _running(self, node_id: int) -> SimNode:
        cluster, _ = self._need()
        node = cluster.running.get(node_id)
        if node is None:
            raise TranscriptError(f"node {node_id} is not running")
        return node

    def _do_append(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        node = self._leader() if d.args[0] == "leader" else self._running(int(d.args[0]))
        now_ms = cluster.scheduler.now_ms
        values = [encode_value(int(v)) for v in d.args[1:]]
        try:
            last = node.raft.append(values, epoch=node.raft.epoch, now_ms=now_ms)
        except Exception as e:  # NotLeaderError is the answer the transcript wants to show
            return [f"error: {type(e).__name__}: {e}"]
        cluster._arm_poll(node, node.raft.next_deadline_ms(now_ms))
        return [f"last offset {last}"]

    def _do_crash(self, d: Directive) -> list[str]:
        cluster, network = self._need()
        node_id = int(d.args[0])
        lost_before = cluster.lost_offsets
        cluster.kill(node_id)
        network.pending = [e for e in network.pending if e.destination != node_id]
        return [f"lost {cluster.lost_offsets - lost_before} unflushed offsets"]

    def _do_restart(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        cluster.start(int(d.args[0]))
        return []

    def _do_wipe(self, d: Directive) -> list[str]:
        cluster, network = self._need()
        node_id = int(d.args[0])
        cluster.wipe(node_id)
        network.pending = [e for e in network.pending if e.destination != node_id]
        return []

    def _do_shutdown(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        cluster.shutdown(int(d.args[0]))
        return []

    def _do_partition(self, d: Directive) -> list[str]:
        _, network = self._need()
        network.partition(*[_ids(group) for group in d.args])
        return []

    def _do_heal(self, d: Directive) -> list[str]:
        _, network = self._need()
        network.heal()
        return []

    def _leader(self) -> SimNode:
        cluster, _ = self._need()
        leader = cluster.leader()
        if leader is None:
            raise TranscriptError("there is no leader")
        return leader

    def _do_add_voter(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        node_id = int(d.args[0])
        request = raft_messages.add_voter_request(
            cluster_id=CLUSTER_ID,
            voter=ReplicaKey(node_id, cluster.disks[node_id].directory_id),
            endpoints=(endpoint_of(node_id),),
            timeout_ms=cluster.raft_config.request_timeout_ms,
        )
        cluster.admin_request(self._leader().node_id, request)
        return []

    def _do_remove_voter(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        node_id = int(d.args[0])
        request = raft_messages.remove_voter_request(
            cluster_id=CLUSTER_ID, voter=ReplicaKey(node_id, cluster.disks[node_id].directory_id)
        )
        cluster.admin_request(self._leader().node_id, request)
        return []

    def _do_describe_quorum(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        target = int(d.args[0]) if d.args else self._leader().node_id
        cluster.admin_request(target, raft_messages.describe_quorum_request())
        return []

    def _do_upgrade_kraft_version(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        refusal = cluster.upgrade_kraft_version(KRAFT_VERSION_1)
        return ["ok" if refusal is None else f"refused: {refusal}"]

    def _do_log(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        log = cluster.disks[int(d.args[0])].log
        lines = [
            f"start={log.log_start_offset} end={log.end_offset().offset} flushed={log.flushed_offset} "
            f"snapshots={[f'{s.offset}-{s.epoch}' for s in log.snapshot_ids()]}"
        ]
        lines += [_records(b.raw) for b in log.batches()]
        return lines

    def _do_persisted(self, d: Directive) -> list[str]:
        cluster, _ = self._need()
        disk = cluster.disks[int(d.args[0])]
        state = disk.quorum_state
        if state is None:
            return ["(none)"]
        voted = "-" if state.voted_key is None else str(state.voted_key.id)
        leader = "-" if state.leader_id is None else str(state.leader_id)
        return [f"epoch={state.epoch} leader={leader} voted={voted} writes={disk.quorum_state_writes}"]
