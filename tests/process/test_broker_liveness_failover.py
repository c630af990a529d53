"""A broker that dies around a kill -9 of the active controller is still fenced (issue 16).

Three real controller processes, three brokers played over the protocol. In each round one broker
goes silent at a chosen point around a SIGKILL of the active controller: before the kill, during
the election, after the new leader is active. Every time, the new active controller must fence it
within the session timeout plus the time the new leader took to be elected and activate (the
seeds' "up to a session timeout of extra fencing latency after a failover", never "never").

Then the killed controller restarts. Its quorum-state names it leader of the epoch it died in,
so raft starts it Resigned there: it must never activate for that epoch, append or renounce.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest
from played_brokers import (
    HEARTBEAT_INTERVAL_MS,
    SESSION_TIMEOUT_MS,
    Broker,
    create_topic,
    fetch_metadata,
    register_brokers,
    stop_all,
    until,
)
from quorum_processes import ProcessCluster

from kraft_engine.admin.controller_admin import ControllerAdmin

pytestmark = pytest.mark.process

# Kafka's defaults: a follower notices a dead leader after the fetch timeout, then elects within
# about one election timeout (randomised up to twice it).
FETCH_TIMEOUT_MS = 2000
ELECTION_TIMEOUT_MS = 1000
ELECTION_BOUND_S = (FETCH_TIMEOUT_MS + 2 * ELECTION_TIMEOUT_MS) / 1000
# The fencing task samples 8 times per session; the slack covers scheduling three controller
# processes and the test on a small shared machine.
FENCE_BOUND_S = 1.125 * SESSION_TIMEOUT_MS / 1000 + ELECTION_BOUND_S + HEARTBEAT_INTERVAL_MS / 1000 + 3.0

# Silence the broker this long after the kill (negative: before it).
ROUNDS = {"before the kill": -2.0, "during the election": 1.0, "after the new leader is active": None}


async def _fenced(admin: ControllerAdmin, broker_id: int) -> bool:
    """The active controller's committed image has the broker fenced (an offline replica
    everywhere) and leading nothing."""
    [topic] = (await fetch_metadata(admin, "liveness")).topics
    return all(
        broker_id in [int(r) for r in p.offline_replicas] and int(p.leader_id) != broker_id for p in topic.partitions
    )


async def _epoch_and_leader(cluster: ProcessCluster, survivors: list[int]) -> tuple[int, int]:
    leader = await asyncio.to_thread(cluster.wait_for_leader, survivors)
    return int(cluster.status_of(leader)["epoch"]), leader


async def test_a_broker_silenced_around_a_kill_9_of_the_active_controller_is_fenced_every_time(
    controllers: ProcessCluster, admin: ControllerAdmin
) -> None:
    brokers = await register_brokers(controllers, admin)
    silenced_ids = iter((1, 2, 3))
    timeline: list[str] = []
    try:
        await create_topic(controllers, "liveness", partitions=6)
        for what, silence_after_s in ROUNDS.items():
            victim = brokers[next(silenced_ids)]
            active = await asyncio.to_thread(controllers.wait_for_leader)
            killed_epoch = int(controllers.status_of(active)["epoch"])
            survivors = [n for n in (1, 2, 3) if n != active]
            if silence_after_s is not None and silence_after_s < 0:
                await victim.stop_heartbeats()
                silenced_s = time.monotonic()
                await asyncio.sleep(-silence_after_s)
            await asyncio.to_thread(controllers.kill, active)
            killed_s = time.monotonic()
            if silence_after_s is None:
                await _epoch_and_leader(controllers, survivors)
                await until(lambda: _alive(admin), timeout_s=30, what="the new active controller to answer")
                await victim.stop_heartbeats()
                silenced_s = time.monotonic()
            elif silence_after_s > 0:
                await asyncio.sleep(silence_after_s)
                await victim.stop_heartbeats()
                silenced_s = time.monotonic()
            await until(lambda v=victim: _fenced(admin, v.broker_id), timeout_s=60,
                        what=f"broker {victim.broker_id} silenced {what} to be fenced")
            fenced_after_s = time.monotonic() - silenced_s
            new_epoch, new_leader = await _epoch_and_leader(controllers, survivors)
            timeline.append(f"{what}: broker {victim.broker_id} silenced, controller {active} killed "
                            f"{killed_s - silenced_s:+.2f} s later, controller {new_leader} leads epoch {new_epoch}, "
                            f"fenced {fenced_after_s:.2f} s after silence")
            assert fenced_after_s <= FENCE_BOUND_S, "\n".join(timeline)
            # The live brokers were not fenced for the failover.
            [topic] = (await fetch_metadata(admin, "liveness")).topics
            offline = {int(r) for p in topic.partitions for r in p.offline_replicas}
            assert offline == {victim.broker_id}, "\n".join(timeline)

            # The killed leader restarts Resigned in the epoch it died in: it never acts as active there.
            log_before = len(controllers.log(active))
            await asyncio.to_thread(controllers.start, active)
            await until(lambda n=active: _following(controllers, n), timeout_s=60,
                        what=f"controller {active} to follow the new leader")
            restarted_log = controllers.log(active)[log_before:]
            activations = [int(e) for e in re.findall(rf"Controller {active} is active in epoch (\d+)", restarted_log)]
            assert all(epoch > killed_epoch for epoch in activations), restarted_log
            assert f"Controller {active} renounced" not in restarted_log, restarted_log
            assert "renouncing" not in restarted_log, restarted_log
            # The silenced broker comes back (a new incarnation, as a restarted broker) for the next round.
            victim.incarnation = uuid.uuid4()
            await victim.register()
            victim.start_heartbeats()
            await until(lambda v=victim: _unfenced(v), timeout_s=30, what=f"broker {victim.broker_id} back")
        print("\n".join(timeline))  # the figures behind docs/issue-16-checklist.md (pytest -s shows them)
    finally:
        await stop_all(brokers)


async def _alive(admin: ControllerAdmin) -> bool:
    await fetch_metadata(admin, "liveness")
    return True


async def _unfenced(broker: Broker) -> bool:
    return not broker.fenced


async def _following(cluster: ProcessCluster, node_id: int) -> bool:
    status = await asyncio.to_thread(cluster.status, node_id)
    return status is not None and status["role"] in ("Follower", "Leader")
