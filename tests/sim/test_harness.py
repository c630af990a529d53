"""The simulation harness itself: seeded scheduling, the faulty network, transcript files.

A harness that is not itself deterministic, or a network rule that silently does nothing, would
make every simulation result meaningless, so these are tested directly.
"""

from __future__ import annotations

import pytest

from kraft_engine.sim.datadriven import Directive, TranscriptError, parse_transcript, render_transcript
from kraft_engine.sim.invariants import SimulationFailure, Violation
from kraft_engine.sim.network import Envelope, LinkRule, Network
from kraft_engine.sim.scheduler import Scheduler, Stalled


def _trace(seed: int) -> list[tuple[int, str]]:
    scheduler = Scheduler(seed=seed)
    trace: list[tuple[int, str]] = []
    for name in "abc":
        scheduler.every(10, lambda n=name: trace.append((scheduler.now_ms, n)), label=name, jitter_ms=7)
    scheduler.run_for(200)
    return trace


def test_same_seed_same_schedule_and_different_seed_differs() -> None:
    assert _trace(7) == _trace(7)
    assert _trace(7) != _trace(8)


def test_events_run_in_deadline_order_then_insertion_order() -> None:
    scheduler = Scheduler(seed=0)
    order: list[str] = []
    scheduler.call_at(5, lambda: order.append("late"), label="late")
    scheduler.call_at(1, lambda: order.append("first"), label="first")
    scheduler.call_at(1, lambda: order.append("second"), label="second")
    cancelled = scheduler.call_at(2, lambda: order.append("cancelled"), label="cancelled")
    cancelled.cancel()
    scheduler.run_for(10)
    assert order == ["first", "second", "late"]
    assert scheduler.now_ms == 10


def test_violation_reports_seed_and_event_index() -> None:
    scheduler = Scheduler(seed=42)
    state = {"hwm": 5}

    def check() -> None:
        if state["hwm"] < 5:
            raise Violation("MonotonicHighWatermark", "5 -> 3")

    scheduler.add_check(check)
    scheduler.call_at(1, lambda: None, label="fine")
    scheduler.call_at(2, lambda: state.update(hwm=3), label="broken")
    with pytest.raises(SimulationFailure) as excinfo:
        scheduler.run_for(10)
    failure = excinfo.value
    assert (failure.seed, failure.event_index, failure.invariant) == (42, 2, "MonotonicHighWatermark")
    assert "seed 42" in str(failure) and "event 2" in str(failure)


def test_run_until_enforces_a_virtual_time_bound() -> None:
    scheduler = Scheduler(seed=1)
    scheduler.every(100, lambda: None, label="tick")
    with pytest.raises(Stalled) as excinfo:
        scheduler.run_until(lambda: False, what="leader elected", within_ms=1000)
    assert excinfo.value.invariant == "Liveness"
    assert scheduler.now_ms <= 1100


def _network(seed: int, rule: LinkRule) -> tuple[Scheduler, Network, list[Envelope]]:
    scheduler = Scheduler(seed=seed)
    received: list[Envelope] = []
    return scheduler, Network(scheduler, deliver=received.append, default_rule=rule), received


def test_network_drops_duplicates_and_reorders_per_its_rule() -> None:
    scheduler, network, received = _network(3, LinkRule(drop_rate=0.3, duplicate_rate=0.3, delay_max_ms=50))
    for i in range(200):
        network.send(1, 2, i)
    scheduler.run_for(100)
    payloads = [e.payload for e in received]
    assert network.stats.dropped > 0 and network.stats.duplicated > 0
    assert len(payloads) == 200 - network.stats.dropped + network.stats.duplicated
    assert len(set(payloads)) < len(payloads)  # duplicates arrived
    assert payloads != sorted(payloads)  # and out of order


def test_partition_cuts_links_both_ways_including_messages_in_flight() -> None:
    scheduler, network, received = _network(0, LinkRule(delay_min_ms=10, delay_max_ms=10))
    network.send(1, 3, "in flight")
    network.partition([1, 2], [3])
    network.send(3, 1, "blocked")
    network.send(1, 2, "same side")
    scheduler.run_for(20)
    assert [e.payload for e in received] == ["same side"]
    network.heal()
    network.send(3, 1, "healed")
    scheduler.run_for(20)
    assert [e.payload for e in received] == ["same side", "healed"]


def test_transcript_round_trip_keeps_comments_and_fenced_output() -> None:
    text = (
        "# Election basics.\n"
        "add-nodes 3\n----\nok\n\n"
        "# Blank lines in output need a fence.\n"
        "status\n----\n----\nnode 1\n\nnode 2\n----\n----\n\n"
        "tick 1 ms=10\n----\n"
    )
    steps, trailing = parse_transcript(text)
    assert [s.directive for s in steps] == ["add-nodes 3", "status", "tick 1 ms=10"]
    assert steps[1].expected == "node 1\n\nnode 2"
    assert steps[1].comments == ["# Blank lines in output need a fence."]
    assert render_transcript(steps, trailing, output_for=lambda s: s.expected) == text


def test_transcript_without_separator_is_refused_with_its_line() -> None:
    with pytest.raises(TranscriptError, match=r"x.txt:2: expected '----'"):
        parse_transcript("\ncampaign 1\nok\n", name="x.txt")


def test_directive_parsing() -> None:
    d = Directive.parse("deliver 1 drop=2,3 'to=a b'")
    assert (d.command, d.args, d.options) == ("deliver", ("1",), {"drop": "2,3", "to": "a b"})


def test_a_crash_loses_exactly_the_unflushed_log_and_a_wipe_loses_everything() -> None:
    import uuid

    from kraft_engine.raft import ElectionState
    from kraft_engine.records.log_batch import build_data_batch
    from kraft_engine.sim.disk import SimDisk

    disk = SimDisk(uuid.UUID(int=1))
    disk.log.append(build_data_batch([b"a", b"b"], base_offset=0, epoch=1, timestamp_ms=0))
    disk.log.flush()
    disk.log.append(build_data_batch([b"c"], base_offset=2, epoch=1, timestamp_ms=0))
    disk.write_quorum_state(ElectionState(epoch=1, leader_id=2))
    assert disk.crash() == 1
    assert disk.log.end_offset().offset == 2
    assert disk.quorum_state == ElectionState(epoch=1, leader_id=2)  # written durably
    assert disk.crash() == 0  # nothing more to lose
    disk.wipe(uuid.UUID(int=2))
    assert (disk.log.end_offset().offset, disk.quorum_state, disk.directory_id) == (0, None, uuid.UUID(int=2))


def test_a_killed_process_resets_the_connections_it_held_and_a_vanished_host_does_not() -> None:
    from kraft_engine.raft import Role
    from kraft_engine.sim.scenarios import SimRun

    def roles_after_kill(*, reset_connections: bool) -> list[Role]:
        run = SimRun(0, voters=3, faulty_network=False)
        leader_id = run.warm_up()
        run.scheduler.run_for(100)  # the followers' next Fetches are parked on the leader
        assert run.cluster.running[leader_id].inbound
        run.cluster.kill(leader_id, reset_connections=reset_connections)
        run.scheduler.run_for(20)
        return [node.raft.role for node in run.cluster.running.values()]

    # Reset: each follower hears DISCONNECTED, its reconnect is refused, and it goes Prospective.
    assert Role.FOLLOWER not in roles_after_kill(reset_connections=True)
    # Vanished host: nothing is heard until the request timeout; they are still following.
    assert roles_after_kill(reset_connections=False) == [Role.FOLLOWER, Role.FOLLOWER]
