"""The periodic fencing task: it runs every broker.session.timeout.ms / 8 and fences one stale broker
per run, so a silent broker is fenced within 112.5 % of the session timeout of its last contact."""

from __future__ import annotations

from kraft_engine.records import BrokerRegistrationChangeRecord, FenceBrokerRecord

from .harness import Harness

SESSION_TIMEOUT_MS = 9000
PERIOD_MS = SESSION_TIMEOUT_MS // 8


def test_silent_brokers_are_fenced_one_per_run_within_an_eighth_of_the_session_timeout() -> None:
    cluster = Harness(session_timeout_ms=SESSION_TIMEOUT_MS).unfenced(1, 2, 3)  # last contact at 0 ms
    controller = cluster.controller
    fenced_at: dict[int, int] = {}
    while len(fenced_at) < 3:
        deadline = controller.next_deadline_ms()  # the next run of any periodic task
        assert deadline is not None and deadline <= 2 * SESSION_TIMEOUT_MS
        cluster.now_ms = deadline
        controller.tick(deadline)
        cluster.commit()
        # From 3.3-IV3 fencing is a BrokerRegistrationChangeRecord with fenced = 1 (Kafka's FENCE).
        fences = [r.broker_id for r in cluster.written
                  if isinstance(r, BrokerRegistrationChangeRecord) and r.fenced == 1]
        fences += [r.id for r in cluster.written if isinstance(r, FenceBrokerRecord)]
        assert len(fences) <= 1  # one stale broker per run
        for broker_id in fences:
            fenced_at[broker_id] = deadline
    # Nobody is fenced before the session expires; the first within 112.5 % of it, the others on
    # the task's next runs, one period apart.
    times = sorted(fenced_at.values())
    assert SESSION_TIMEOUT_MS < times[0] <= SESSION_TIMEOUT_MS * 1.125
    assert times[1] - times[0] == PERIOD_MS and times[2] - times[1] == PERIOD_MS
    assert controller.fenced_broker_count() == 3
