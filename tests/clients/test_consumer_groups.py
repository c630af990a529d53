"""kafka-python, aiokafka and confluent-kafka (librdkafka) against three of our brokers: each
produces with acks=all and idempotence, and consumes in a group of two that rebalances when one
member leaves and another joins (the workload and checks of `group_workload`). Then, with
librdkafka, a kill -9 of the group coordinator's broker during a rebalance: the group converges
on the new coordinator, no committed offset goes backwards, and reading resumes from them.
(kafka-python leaks the sockets of connections to a killed broker, which pytest reports as
unraisable warnings, so the kill -9 runs with librdkafka, whose sockets are not Python's.)"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from broker_processes import BrokerCluster
from conftest import GROUP_CONFIG
from group_members import CLIENTS, TIMEOUT_S, Member, committed_and_ends, create_topic, produce
from group_workload import PARTITIONS, PHASE_RECORDS, Ledger, check
from quorum_processes import wait_for

from kraft_engine.records.group_records import partition_for_group

pytestmark = [
    pytest.mark.process,
    # kafka-python loads its schemas with importlib.resources' legacy calls.
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:open_text is deprecated:DeprecationWarning"),
]


def assignment_is(members: list[Member], predicate: Callable[[list[set[int]]], bool]) -> bool:
    for member in members:
        assert member.errors == [], (member.name, member.errors)
    return predicate([m.assigned for m in members])


def splits_all(assignments: list[set[int]]) -> bool:
    """Every member holds partitions, none is held twice, and all of them are held."""
    return all(assignments) and sum(len(a) for a in assignments) == PARTITIONS and \
        set().union(*assignments) == set(range(PARTITIONS))


def new_topic(cluster: BrokerCluster, topic: str) -> None:
    create_topic(cluster.broker_bootstrap(), topic)
    for partition in range(PARTITIONS):
        cluster.wait_isr(topic, partition, set(cluster.brokers))


@pytest.mark.parametrize("client", CLIENTS)
def test_group_of_two_rebalances_on_leave_and_join_reading_every_record_once(group_brokers: BrokerCluster,
                                                                             client: str) -> None:
    bootstrap = group_brokers.broker_bootstrap()
    topic, group = f"{client}-group-orders", f"{client}-group"
    new_topic(group_brokers, topic)
    ledger = Ledger()

    def member(name: str) -> Member:
        return Member(client, name, bootstrap=bootstrap, topic=topic, group=group, ledger=ledger)

    a, b = member("member-a"), member("member-b")
    wait_for(lambda: assignment_is([a, b], splits_all), timeout_s=TIMEOUT_S, what="a and b to share the partitions")
    acked = produce(client, bootstrap, topic, range(PHASE_RECORDS))
    wait_for(lambda: ledger.count() == PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the first records read")
    assert ledger.members_with_reads() == {"member-a", "member-b"}

    b.leave()
    wait_for(lambda: assignment_is([a], splits_all), timeout_s=TIMEOUT_S, what="a to hold every partition")
    acked += produce(client, bootstrap, topic, range(PHASE_RECORDS, 2 * PHASE_RECORDS))
    wait_for(lambda: ledger.count() == 2 * PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the second records read")

    c = member("member-c")
    wait_for(lambda: assignment_is([a, c], splits_all), timeout_s=TIMEOUT_S, what="a and c to share the partitions")
    acked += produce(client, bootstrap, topic, range(2 * PHASE_RECORDS, 3 * PHASE_RECORDS))
    wait_for(lambda: ledger.count() == 3 * PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the third records read")
    assert "member-c" in ledger.members_with_reads()
    a.leave()
    c.leave()
    committed, ends = committed_and_ends(bootstrap, topic, group)
    check(acked, ledger, committed, ends)


def coordinator_of(cluster: BrokerCluster, group: str) -> int:
    """The broker leading the group's `__consumer_offsets` partition (Kafka's partitionFor)."""
    partition = partition_for_group(group, partitions=int(GROUP_CONFIG["offsets.topic.num.partitions"]))

    def leader() -> int | None:
        for node_id in cluster.brokers:
            if cluster.status(node_id) is None:
                continue
            found = cluster.partitions(node_id).get(("__consumer_offsets", partition))
            if found is not None and found["leader"] == node_id:
                return node_id
        return None

    return wait_for(leader, timeout_s=TIMEOUT_S, what=f"a leader of __consumer_offsets-{partition}")


def test_kill_9_of_the_coordinator_during_a_rebalance_keeps_committed_offsets_and_the_group(
        group_brokers: BrokerCluster) -> None:
    client = "confluent-kafka"
    bootstrap = group_brokers.broker_bootstrap()
    topic, group = "failover-orders", "failover-group"
    new_topic(group_brokers, topic)
    ledger = Ledger()
    a = Member(client, "member-a", bootstrap=bootstrap, topic=topic, group=group, ledger=ledger)
    wait_for(lambda: assignment_is([a], splits_all), timeout_s=TIMEOUT_S, what="a to hold every partition")
    acked = produce(client, bootstrap, topic, range(PHASE_RECORDS))
    wait_for(lambda: ledger.count() == PHASE_RECORDS, timeout_s=TIMEOUT_S, what="the first records read")
    committed_before, ends_before = committed_and_ends(bootstrap, topic, group)
    assert committed_before == ends_before

    coordinator = coordinator_of(group_brokers, group)
    survivors = sorted(group_brokers.brokers - {coordinator})
    surviving = group_brokers.broker_bootstrap(survivors)
    b = Member(client, "member-b", bootstrap=surviving, topic=topic, group=group, ledger=ledger)
    group_brokers.kill(coordinator)  # kill -9 while b's JoinGroup starts a rebalance
    try:
        wait_for(lambda: coordinator_of(group_brokers, group) != coordinator, timeout_s=TIMEOUT_S,
                 what="the coordinator to move")
        wait_for(lambda: assignment_is([a, b], splits_all), timeout_s=TIMEOUT_S,
                 what="a and b to share the partitions after the failover")
        committed_after, _ = committed_and_ends(surviving, topic, group)
        for partition, offset in committed_before.items():
            assert committed_after[partition] >= offset, f"the committed offset of {partition} went backwards"
        acked += produce(client, surviving, topic, range(PHASE_RECORDS, 2 * PHASE_RECORDS))
        wait_for(lambda: ledger.count() == 2 * PHASE_RECORDS, timeout_s=TIMEOUT_S,
                 what="the records produced after the failover read")
        assert ledger.members_with_reads() == {"member-a", "member-b"}
        a.leave()
        b.leave()
        committed, ends = committed_and_ends(surviving, topic, group)
        check(acked, ledger, committed, ends)
    finally:
        group_brokers.start(coordinator)
        group_brokers.wait_ready([coordinator])


def test_a_static_member_restarted_within_its_session_keeps_its_partitions_without_a_rebalance(
        group_brokers: BrokerCluster) -> None:
    """KIP-345 with librdkafka: a static member closes without leaving and comes back under the
    same group.instance.id; the coordinator gives it its old partitions in the same generation
    (the other member is never asked to rejoin), under a new member id."""
    import asyncio

    from confluent_kafka import Consumer

    from kraft_engine.admin.group_admin import GroupAdmin
    from kraft_engine.protocol import parse_bootstrap_servers

    bootstrap = group_brokers.broker_bootstrap()
    topic, group = "static-orders", "static-group"
    new_topic(group_brokers, topic)

    revoked: list[str] = []

    def consumer(instance: str) -> Consumer:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance,
                      "client.id": instance, "session.timeout.ms": 60_000, "partition.assignment.strategy": "range",
                      "enable.auto.commit": False})
        c.subscribe([topic], on_revoke=lambda _c, partitions: revoked.extend(instance for _ in partitions))
        return c

    def describe() -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]:
        async def ask() -> dict[str, tuple[str, tuple[tuple[str, int], ...]]]:
            async with GroupAdmin(parse_bootstrap_servers(bootstrap)) as admin:
                summary = await admin.describe(group)
                assert summary.state == "Stable", summary.state
                return {m.group_instance_id or "": (m.member_id, m.assignment) for m in summary.members}
        return asyncio.run(ask())

    one = consumer("pod-1")  # the first member: the leader, which pod-2's return must not disturb
    wait_for(lambda: one.poll(0.2) is None and len(one.assignment()) == PARTITIONS, timeout_s=TIMEOUT_S,
             what="pod-1 assigned every partition")
    two = consumer("pod-2")
    try:
        def both_assigned() -> bool:
            one.poll(0.2)
            two.poll(0.2)
            return len(one.assignment()) + len(two.assignment()) == PARTITIONS and bool(one.assignment()) \
                and bool(two.assignment())

        wait_for(both_assigned, timeout_s=TIMEOUT_S, what="both static members assigned")
        revoked.clear()
        before = describe()
        two_partitions = sorted(tp.partition for tp in two.assignment())
        two.close()  # a static member's close sends no LeaveGroup
        assert describe() == before, "the group still counts pod-2 in"
        two = consumer("pod-2")
        wait_for(lambda: one.poll(0.1) is None and two.poll(0.1) is None and len(two.assignment()) > 0,
                 timeout_s=TIMEOUT_S, what="pod-2 back with partitions")
        after = describe()
        assert sorted(tp.partition for tp in two.assignment()) == two_partitions
        assert after["pod-1"] == before["pod-1"], "pod-1 kept its member id and partitions"
        assert after["pod-2"][1] == before["pod-2"][1] and after["pod-2"][0] != before["pod-2"][0]
        assert "pod-1" not in revoked, "pod-1 never gave up its partitions: there was no rebalance"
    finally:
        one.close()
        two.close()
