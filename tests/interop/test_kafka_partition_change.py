"""The engine's PartitionChangeBuilder decides as Apache Kafka 4.1's does, KIP-966's eligible leader
replicas included.

Random partitions (replicas, ISR, ELR, last-known ELR, leader, recovery state), random changes
(a target ISR, replicas that shut down uncleanly, the election kind, min.insync.replicas, which
brokers may lead, ELR on or off, the last known leader used or not) go through both builders: Kafka's
own class, run by `PartitionChangeOracle.java` over its jars, and ours. Every resulting
PartitionChangeRecord (or the absence of one) must be the same, field by field and in order.
Broker ids 17 and 33 share a java.util.HashSet bucket with 1, so the order of the ELR lists is
checked too. Skips without the jars or a JDK.
"""

from __future__ import annotations

import json
import random
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from kraft_engine.controller.partition_change import Election, PartitionChange, PartitionChangeBuilder
from kraft_engine.metadata import LeaderRecoveryState, PartitionRegistration
from kraft_engine.records import MetadataVersion

from .kafka_jars import CLASSPATH, needs_jars

pytestmark = pytest.mark.kafka_jars

ORACLE = Path(__file__).with_name("PartitionChangeOracle.java")
CASES = 1500
_BROKERS = (1, 2, 3, 4, 17, 33)
_MIGRATING = uuid.UUID(int=0)


def _subset(rng: random.Random, values: list[int], *, most: int | None = None) -> list[int]:
    chosen = [v for v in values if rng.random() < 0.5]
    rng.shuffle(chosen)
    return chosen[:most] if most is not None else chosen


def _case(rng: random.Random) -> dict[str, Any]:
    replicas = rng.sample(_BROKERS, rng.randint(1, 4))
    isr = _subset(rng, replicas)
    elr = _subset(rng, [r for r in replicas if r not in isr])
    leader = rng.choice(isr) if isr and rng.random() < 0.85 else -1
    return {
        "replicas": replicas,
        "isr": isr,
        "elr": elr,
        "lastKnownElr": _subset(rng, replicas, most=2),
        "leader": leader,
        "leaderRecoveryState": 1 if leader != -1 and len(isr) == 1 and rng.random() < 0.2 else 0,
        "alive": _subset(rng, list(_BROKERS)),
        "metadataVersion": rng.choice((23, 25, 27)),
        "minIsr": rng.randint(1, 4),
        "elrEnabled": rng.random() < 0.8,
        "useLastKnownLeader": rng.random() < 0.8,
        "election": rng.choice(("ONLINE", "ONLINE", "UNCLEAN", "PREFERRED")),
        "targetIsr": _subset(rng, replicas) if rng.random() < 0.6 else None,
        "uncleanShutdownReplicas": [rng.choice(replicas)] if rng.random() < 0.3 else None,
    }


def _ours(case: dict[str, Any]) -> PartitionChange | None:
    partition = PartitionRegistration(
        replicas=tuple(case["replicas"]), directories=(_MIGRATING,) * len(case["replicas"]),
        isr=tuple(case["isr"]), elr=tuple(case["elr"]), last_known_elr=tuple(case["lastKnownElr"]),
        leader=case["leader"], leader_recovery_state=LeaderRecoveryState(case["leaderRecoveryState"]),
        leader_epoch=0, partition_epoch=0,
    )
    alive = set(case["alive"])
    builder = PartitionChangeBuilder(
        partition, is_acceptable_leader=alive.__contains__,
        metadata_version=MetadataVersion.from_feature_level(case["metadataVersion"]), min_isr=case["minIsr"],
        eligible_leader_replicas_enabled=case["elrEnabled"],
    )
    builder.set_use_last_known_leader(case["useLastKnownLeader"])
    builder.set_election(Election[case["election"]])
    if case["targetIsr"] is not None:
        builder.set_target_isr(case["targetIsr"])
    if case["uncleanShutdownReplicas"] is not None:
        builder.set_unclean_shutdown_replicas(case["uncleanShutdownReplicas"])
    return builder.build()


def _as_kafkas(change: PartitionChange | None) -> dict[str, Any] | None:
    """Our change in the fields of Kafka's JSON for a PartitionChangeRecord (absent = unchanged)."""
    if change is None:
        return None

    def ints(values: tuple[int, ...] | None) -> list[int] | None:
        return None if values is None else list(values)

    return {
        "isr": ints(change.isr),
        "leader": change.leader,
        "replicas": ints(change.replicas),
        "removingReplicas": ints(change.removing_replicas),
        "addingReplicas": ints(change.adding_replicas),
        "leaderRecoveryState": change.leader_recovery_state,
        "directories": None if change.directories is None else [str(d) for d in change.directories],
        "eligibleLeaderReplicas": ints(change.eligible_leader_replicas),
        "lastKnownElr": ints(change.last_known_elr),
    }


def _kafkas(line: str) -> dict[str, Any] | None:
    written = json.loads(line)
    if written is None:
        return None
    defaults = {"leader": -2, "leaderRecoveryState": -1}
    return {key: written.get(key, defaults.get(key)) for key in (
        "isr", "leader", "replicas", "removingReplicas", "addingReplicas", "leaderRecoveryState", "directories",
        "eligibleLeaderReplicas", "lastKnownElr",
    )}


@needs_jars
def test_our_builder_writes_the_records_kafkas_writes() -> None:
    assert CLASSPATH is not None
    rng = random.Random(966)
    cases = [_case(rng) for _ in range(CASES)]
    kafka = subprocess.run(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-Dlog4j2.level=warn", "-cp", CLASSPATH,
         str(ORACLE)], input="".join(json.dumps(c) + "\n" for c in cases),
        capture_output=True, text=True, timeout=240, check=False,
    )
    assert kafka.returncode == 0, kafka.stderr
    answers = kafka.stdout.splitlines()
    assert len(answers) == len(cases)
    mismatches = [
        (case, _kafkas(answer), _as_kafkas(_ours(case)))
        for case, answer in zip(cases, answers, strict=True)
        if _kafkas(answer) != _as_kafkas(_ours(case))
    ]
    assert mismatches == [], f"{len(mismatches)} of {CASES} differ; first (case, Kafka's, ours): {mismatches[0]}"
    # The cases reach every rule: elections from the ELR, of the last known leader, unclean ones,
    # ELR lists written, ISRs emptied.
    changes = [_kafkas(a) for a in answers]
    assert sum(c is not None and c["eligibleLeaderReplicas"] not in (None, []) for c in changes) > 50
    assert sum(c is not None and c["lastKnownElr"] not in (None, []) for c in changes) > 20
    assert sum(c is not None and c["isr"] == [] for c in changes) > 20
    assert sum(c is not None and c["leaderRecoveryState"] == 1 for c in changes) > 20
    from_elr = sum(
        c is not None and c["leader"] >= 0 and c["leader"] in case["elr"] and not case["isr"]
        for case, c in zip(cases, changes, strict=True)
    )
    assert from_elr > 10
