"""Brokers whose sessions the simulated quorum controllers must keep, and the rules they are held to.

The `broker-liveness` scenario runs the real quorum controller on every simulated node
(`ControllerMachine`) and plays brokers against it the way a broker's lifecycle manager does:
BrokerRegistration, then a BrokerHeartbeat every `HEARTBEAT_INTERVAL_MS`, each sent to the
active controller of the newest epoch (a broker finds it through NOT_CONTROLLER answers and
metadata; here it finds it at once, so every lost session is the controller's doing). A
heartbeat's contact time is tracked as it arrives, before its event is queued, as the node's
shell does. Brokers go silent and come back as new incarnations while controllers crash,
restart (a restarted leader is Resigned in its old epoch) and get cut off.

Checked after every event of the run:

- SilentBrokerFenced: a broker silent longer than the session timeout (plus one fencing period
  per broker, as the stale-broker task fences one broker per run) is fenced by every controller
  that has been active, and leading in raft, for that long. A failover costs at most one
  session timeout after the new controller's activation, never "never".
- LiveBrokerNeverFenced: no fence of a broker incarnation commits less than a session timeout
  after its last heartbeat reached the active controller.
- ControllerActivation / ControllerWrite (in `ControllerMachine`): no controller activates in, or
  writes to, an epoch its raft node never led.

With ELR on (eligible.leader.replicas.version 1 finalized at bootstrap, a topic of replication
factor 3 and min.insync.replicas 2 over the four brokers), every committed batch also holds each
controller's partitions to KIP-966's rules (EligibleLeaderReplicas):

- the ELR and the last known ELR are replicas of the partition, and no ELR member is in the ISR;
- with the ISR at or above min ISR, the ELR and the last known ELR are empty;
- the leader is in the ISR (or there is none), and is never a fenced broker.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from kio.schema.broker_heartbeat.v1.request import BrokerHeartbeatRequest
from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.create_topics.v7.request import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i16, i32, i32Timedelta, i64, u16

from kraft_engine.controller import QuorumController
from kraft_engine.raft import CommittedBatch, Role
from kraft_engine.records import BrokerRegistrationChangeRecord, FenceBrokerRecord, decode_metadata_record
from kraft_engine.sim.cluster import CLUSTER_ID, SimCluster
from kraft_engine.sim.controller_machine import (
    ELR_FEATURE,
    METADATA_VERSION,
    ControllerMachine,
    ControllerWrite,
)
from kraft_engine.sim.invariants import Violation

__all__ = ["ELR_MIN_ISR", "ELR_TOPIC", "HEARTBEAT_INTERVAL_MS", "SESSION_TIMEOUT_MS", "SimBroker", "SimBrokers"]

ELR_TOPIC = "elr"
ELR_MIN_ISR = 2

SESSION_TIMEOUT_MS = 9000
"""broker.session.timeout.ms's default (the controllers' default too)."""
HEARTBEAT_INTERVAL_MS = 2000
"""broker.heartbeat.interval.ms's default."""
_FENCING_PERIOD_MS = SESSION_TIMEOUT_MS // 8
# A heartbeat's event, a tick and the fence's generation happen within the controller's next
# wake-ups; the virtual clock charges them little, this covers their scheduling.
_SLACK_MS = 500
_CHECK_PERIOD_MS = 250
# How long a played broker waits for its BrokerRegistration's answer before sending it again
# (Kafka's broker times the request out and retries; a disconnect fails it sooner).
_REQUEST_TIMEOUT_MS = 4000


@dataclass
class SimBroker:
    broker_id: int
    alive: bool = True
    incarnation: uuid.UUID = field(default_factory=uuid.uuid4)
    epoch: int | None = None  # None until this incarnation's registration is acknowledged
    registering: ControllerWrite | None = None
    silent_since_ms: int | None = None
    #: The last time a heartbeat of the current incarnation reached an active controller.
    last_contact_ms: int = -1
    #: Whether this incarnation was ever unfenced (only those have a session to lose).
    was_unfenced: bool = False


class SimBrokers:
    """The brokers of one run: their heartbeat loop and the two broker invariants."""

    def __init__(self, cluster: SimCluster, count: int) -> None:
        self.cluster = cluster
        self.scheduler = cluster.scheduler
        random = self.scheduler.random
        self.brokers = {
            b: SimBroker(b, incarnation=uuid.UUID(int=random.getrandbits(128))) for b in range(1, count + 1)
        }
        self.fences_checked: set[tuple[int, int]] = set()  # (broker, epoch) already seen committed
        self.fenced_live: list[str] = []
        #: Committed partition states seen with a non-empty ELR (the runs exercise KIP-966).
        self.elr_states_seen = 0
        for broker in self.brokers.values():
            self.scheduler.every(HEARTBEAT_INTERVAL_MS, functools.partial(self._beat, broker),
                                 label=f"broker {broker.broker_id}", jitter_ms=200, delay_ms=random.randint(1, 500))
        self.scheduler.every(_CHECK_PERIOD_MS, self.check_silent_brokers_fenced, label="broker invariants")

    # -- the story's levers --------------------------------------------------------------------
    def silence(self, broker_id: int) -> None:
        broker = self.brokers[broker_id]
        if broker.alive:
            broker.alive = False
            broker.silent_since_ms = self.scheduler.now_ms

    def revive(self, broker_id: int) -> None:
        """The broker's process comes back: a new incarnation, which registers afresh."""
        broker = self.brokers[broker_id]
        if broker.alive:
            return
        broker.alive = True
        broker.silent_since_ms = None
        broker.incarnation = uuid.UUID(int=self.scheduler.random.getrandbits(128))
        broker.epoch = None
        broker.registering = None
        broker.was_unfenced = False

    def live(self) -> list[int]:
        return [b for b, broker in self.brokers.items() if broker.alive]

    def silent(self) -> list[int]:
        return [b for b, broker in self.brokers.items() if not broker.alive]

    # -- a broker's lifecycle manager ----------------------------------------------------------
    def active_controller(self) -> ControllerMachine | None:
        """The active controller of the newest epoch, where brokers send their requests."""
        found: ControllerMachine | None = None
        for node in self.cluster.running.values():
            machine = node.counter
            if not isinstance(machine, ControllerMachine) or not machine.controller.is_active():
                continue
            if found is None or machine.controller.events.cur_claim_epoch > found.controller.events.cur_claim_epoch:
                found = machine
        return found

    def _beat(self, broker: SimBroker) -> None:
        if not broker.alive:
            return
        machine = self.active_controller()
        if machine is None:
            return  # no controller to talk to: the request fails and is retried next interval
        now_ms = self.scheduler.now_ms
        if broker.epoch is None:
            self._register(broker, machine)
            return
        # The shell tracks the contact the moment the request arrives, before it is queued.
        machine.controller.track_broker_heartbeat(broker.broker_id, broker.epoch, now_ms)
        broker.last_contact_ms = now_ms
        offset = machine.controller.last_stable_offset()
        request = BrokerHeartbeatRequest(
            broker_id=BrokerId(broker.broker_id), broker_epoch=i64(broker.epoch), current_metadata_offset=i64(offset),
            want_fence=False, want_shut_down=False, offline_log_dirs=(),
        )
        machine.write("processBrokerHeartbeat", lambda c: c.broker_heartbeat(request, now_ms=now_ms))
        registration = machine.controller.cluster_control.broker(broker.broker_id)
        if registration is not None and registration.epoch == broker.epoch and not registration.fenced:
            broker.was_unfenced = True

    def _register(self, broker: SimBroker, machine: ControllerMachine) -> None:
        pending = broker.registering
        now_ms = self.scheduler.now_ms
        if pending is not None and pending.outcome is None:
            if now_ms - pending.sent_ms < _REQUEST_TIMEOUT_MS:
                return  # still in flight
            # A write lost with its controller (killed, or renounced before it answered) never gets
            # an outcome here; a real broker's request times out and it registers again.
            broker.registering = pending = None
        if pending is not None and pending.outcome == "ok" and broker.alive:
            broker.epoch = int(pending.response.broker_epoch)  # type: ignore[attr-defined]
            broker.last_contact_ms = pending.sent_ms
            broker.registering = None
            return
        request = BrokerRegistrationRequest(
            broker_id=BrokerId(broker.broker_id), cluster_id=CLUSTER_ID, incarnation_id=broker.incarnation,
            listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092 + broker.broker_id),
                                security_protocol=i16(0)),),
            features=(Feature(name="metadata.version", min_supported_version=i16(7),
                              max_supported_version=i16(METADATA_VERSION)),
                      Feature(name=ELR_FEATURE, min_supported_version=i16(0), max_supported_version=i16(1))),
            rack=None, log_dirs=(uuid.UUID(int=self.scheduler.random.getrandbits(128)),),
        )

        def register(controller: QuorumController) -> int:
            return controller.register_broker(request, now_ms=now_ms)

        broker.registering = machine.write("registerBroker", register)

    # -- invariants ----------------------------------------------------------------------------
    def check_silent_brokers_fenced(self) -> None:
        """SilentBrokerFenced (see the module docstring)."""
        now_ms = self.scheduler.now_ms
        bound_ms = SESSION_TIMEOUT_MS + _FENCING_PERIOD_MS * len(self.brokers) + _SLACK_MS
        for node in self.cluster.running.values():
            machine = node.counter
            if not isinstance(machine, ControllerMachine) or not machine.controller.is_active():
                continue
            raft = node.raft
            if raft.role is not Role.LEADER or raft.epoch != machine.activated_epoch:
                continue  # raft moved on; the controller will hear of it
            for broker in self.brokers.values():
                if broker.alive or broker.epoch is None or broker.silent_since_ms is None:
                    continue
                since_ms = max(machine.activated_ms, broker.silent_since_ms)
                if now_ms <= since_ms + bound_ms:
                    continue
                registration = machine.controller.cluster_control.broker(broker.broker_id)
                if registration is not None and registration.epoch == broker.epoch and not registration.fenced:
                    raise Violation(
                        "SilentBrokerFenced",
                        f"broker {broker.broker_id} (epoch {broker.epoch}) silent since {broker.silent_since_ms} ms "
                        f"is still unfenced on controller {machine.node_id}, active in epoch "
                        f"{machine.activated_epoch} since {machine.activated_ms} ms (bound {bound_ms} ms)",
                    )

    def check_committed(self, machine: ControllerMachine, batch: CommittedBatch[bytes]) -> None:
        """LiveBrokerNeverFenced, on a committed batch's records; EligibleLeaderReplicas on the
        controller's partitions once it applied the batch."""
        self._check_elr(machine)
        written_ms = machine.cluster.record_written_ms
        for index, value in enumerate(batch.records):
            record = decode_metadata_record(value)[0]
            if isinstance(record, BrokerRegistrationChangeRecord) and record.fenced == 1:
                key = (int(record.broker_id), int(record.broker_epoch))
            elif isinstance(record, FenceBrokerRecord):
                key = (int(record.id), int(record.epoch))
            else:
                continue
            if key in self.fences_checked:
                continue
            self.fences_checked.add(key)
            broker = self.brokers.get(key[0])
            if broker is None or broker.epoch != key[1]:
                continue
            # When the controller decided the fence: the batch's own timestamp is its start, which
            # may be up to a linger before the fence record joined it.
            fenced_ms = written_ms.get((batch.epoch, batch.base_offset + index), batch.append_timestamp_ms)
            if fenced_ms < broker.last_contact_ms + SESSION_TIMEOUT_MS:
                raise Violation(
                    "LiveBrokerNeverFenced",
                    f"broker {key[0]} (epoch {key[1]}) fenced at {fenced_ms} ms, committed on node "
                    f"{machine.node_id}; its last heartbeat reached the active controller at "
                    f"{broker.last_contact_ms} ms (session {SESSION_TIMEOUT_MS} ms)",
                )

    def create_elr_topic(self) -> ControllerWrite | None:
        """CreateTopics of the ELR topic (four partitions, three replicas, min ISR 2) on the active controller."""
        machine = self.active_controller()
        if machine is None:
            return None
        request = CreateTopicsRequest(
            topics=(CreatableTopic(name=TopicName(ELR_TOPIC), num_partitions=i32(4), replication_factor=i16(3),
                                   assignments=(), configs=(CreatableTopicConfig(name="min.insync.replicas",
                                                                                 value=str(ELR_MIN_ISR)),)),),
            timeout=i32Timedelta.parse(timedelta(seconds=30)), validate_only=False)
        return machine.write("createTopics", lambda c: c.create_topics(request))

    def _check_elr(self, machine: ControllerMachine) -> None:
        """EligibleLeaderReplicas (see the module docstring)."""
        replication = machine.controller.replication_control
        topic_id = replication.topic_id(ELR_TOPIC)
        if topic_id is None:
            return
        cluster = machine.controller.cluster_control
        partition_id = 0
        while (partition := replication.partition(topic_id, partition_id)) is not None:
            where = f"{ELR_TOPIC}-{partition_id} on controller {machine.node_id}: {partition}"
            elr, last_known, isr = set(partition.elr), set(partition.last_known_elr), set(partition.isr)
            if not (elr | last_known) <= set(partition.replicas) or elr & isr:
                raise Violation("EligibleLeaderReplicas", f"ELR outside the replicas or inside the ISR: {where}")
            if len(isr) >= ELR_MIN_ISR and (elr or last_known):
                raise Violation("EligibleLeaderReplicas", f"an ELR kept at or above min ISR {ELR_MIN_ISR}: {where}")
            if partition.leader >= 0:
                registration = cluster.broker(partition.leader)
                if partition.leader not in isr or registration is None or registration.fenced:
                    raise Violation("EligibleLeaderReplicas", f"a leader outside the ISR or fenced: {where}")
            if elr:
                self.elr_states_seen += 1
            partition_id += 1
