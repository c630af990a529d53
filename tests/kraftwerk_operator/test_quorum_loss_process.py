"""Quorum loss on engine processes under a live producer: `kraftwerk up` runs three controllers and
three brokers; a kafka-python producer (acks=all, idempotence) in its own process writes `during-0`
(replicas 3, 4, 5) all along. Two of the three controllers, the active one among them, are
SIGKILLed and cannot come back for a while: every port they bind is held, so each start the
operator makes fails at once (crash-looping pods). While they are down a broker's restart is asked
for (its pod annotation).

What the operator must do: say it (Ready False with NoQuorum, the quorum-loss runbook naming the
voters that are down, opened once and kept open, not closed and reopened as the crash-looping pods
flicker running between their restarts); take no unsafe action (it restarts the dead controllers
and nothing else: no broker restarts without a quorum to register with again, no voter change, no
format); and recover once they can start again: a leader is elected, the runbook closes, the
broker's restart goes ahead. Every acknowledged record is read back by offset."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from kraft_operator.runtime.local import MANUAL_ROLL_FILE

from .live_cluster import LiveCluster, settled, three_and_three
from .workload import acked_count, read_partition

pytestmark = [pytest.mark.process, pytest.mark.timeout(1500)]

CLUSTER = three_and_three("quorumloss")

TOPIC = "during"
UNSAFE = ("RestartNode", "StopNode", "FormatStorage", "ReplaceVolume", "RemoveVoter", "AddVoter", "UnregisterBroker")


def test_two_of_three_controllers_lost_the_runbook_says_so_nothing_unsafe_is_done_and_it_recovers(
    tmp_path: Path,
) -> None:
    cluster = LiveCluster(tmp_path, CLUSTER, name="quorumloss")
    with cluster.running("--demo-topic", ""):
        bootstrap = cluster.ready_with_topic(TOPIC)
        status = cluster.wait("a settled quorum", lambda: settled(s := cluster.status()) and s, timeout_s=120)
        leader = status["quorum"]["leaderId"]
        lost = sorted([leader, next(i for i in (0, 1, 2) if i != leader)])
        broker_pids = {i: cluster.pid(i) for i in (3, 4, 5)}
        unsafe_before = {reason: len(cluster.events(reason)) for reason in UNSAFE}
        starts_before = len(cluster.events("StartNode"))
        seen: list[dict] = []
        with cluster.workload(bootstrap, TOPIC) as checker:
            cluster.more_acks("the producer's first acks")
            with cluster.kept_down(lost):

                def named() -> dict | None:
                    status = cluster.status()
                    if status is None:
                        return None
                    seen.append(status)
                    books = [r for r in status.get("runbooks", []) if r["name"] == "quorum-loss"]
                    if not books or not all(f"{i} (" in books[0]["evidence"][0] for i in lost):
                        return None
                    return books[0]

                book = cluster.wait("the quorum-loss runbook naming the two down voters", named, timeout_s=300)
                assert book["evidence"][0].startswith("voters [0, 1, 2]; down: "), book
                assert "1 of 3 voters run; a majority is 2" in book["evidence"][1], book
                steps = {s["id"]: s for s in book["steps"]}
                assert steps["reform-from-survivor"]["dangerous"] and steps["reform-from-survivor"]["mode"] == "manual"
                (cluster.node_dir(3) / MANUAL_ROLL_FILE).touch()  # a broker restart asked for without a quorum
                acks_at_loss = acked_count(cluster.acks)
                hold_until = time.monotonic() + 20
                while time.monotonic() < hold_until:
                    status = cluster.status()
                    if status is not None:
                        seen.append(status)
                    time.sleep(0.5)
                first = next(i for i, s in enumerate(seen) if any(r["name"] == "quorum-loss" for r in s.get("runbooks", [])))
                during = seen[first:]
                # Said all along: no leader, the runbook open with the first detection's time.
                assert all(any(r["name"] == "quorum-loss" and r["detectedAt"] == book["detectedAt"]
                               for r in s.get("runbooks", [])) for s in during), [s.get("runbooks") for s in during]
                assert all(next(c for c in s["conditions"] if c["type"] == "Ready")["status"] == "False"
                           for s in during)
                # Nothing unsafe: the operator only restarts the dead controllers.
                assert {reason: len(cluster.events(reason)) for reason in UNSAFE} == unsafe_before
                assert {i: cluster.pid(i) for i in (3, 4, 5)} == broker_pids
                started = {int(e.split("node ", 1)[1].split(":", 1)[0]) for e in cluster.events("StartNode")[starts_before:]}
                assert started <= set(lost), started
                acks_during_loss = acked_count(cluster.acks) - acks_at_loss

            def recovered() -> bool:
                return settled(cluster.status()) and cluster.pid(3) != broker_pids[3]

            cluster.wait("a leader again, the runbook closed, broker 3 restarted", recovered, timeout_s=600)
            cluster.more_acks("acks after the recovery")
        stored = read_partition(bootstrap, TOPIC)
    acked, missing, failed = cluster.outcome(stored)
    assert acked > 40 and missing == [], f"{len(missing)} acknowledged record(s) not read back, first {missing[:5]}"
    output = cluster.log.read_text()
    opened = [e for e in cluster.events("RunbookOpened") if e.startswith("Quorum loss")]
    closed = [e for e in cluster.events("RunbookClosed") if e.startswith("quorum-loss")]
    assert len(opened) == 1 and len(closed) == 1, (opened, closed)
    # Broker 3 restarted only once the quorum was back.
    restart = re.search(r"^\w+\s+RestartNode\s+node 3:", output, re.M)
    closed_at = re.search(r"^\w+\s+RunbookClosed\s+quorum-loss", output, re.M)
    assert restart is not None and closed_at is not None and closed_at.start() < restart.start(), output[-4000:]
    print(f"acks {acked} ({acks_during_loss} during the quorum loss), failed {len(failed)}, the checker: {checker.summary()}")
