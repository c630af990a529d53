"""What the Kubernetes runtime reads off a node's pod for a roll: the revision the pod was started
with, when its process started, and the manual-roll annotation. The pods are the client's own
models, shaped as the API server returns them."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes import client as k8s

from kraft_operator.plan import PodPhase
from kraft_operator.runtime.kubernetes import _pod_facts

STARTED = datetime(2026, 11, 25, 23, 30, 5, tzinfo=UTC)


def _pod(*, phase: str = "Running", annotations: dict[str, str] | None = None, deleting: bool = False,
         running: bool = True, labels: dict[str, str] | None = None) -> k8s.V1Pod:
    state = (k8s.V1ContainerState(running=k8s.V1ContainerStateRunning(started_at=STARTED)) if running
             else k8s.V1ContainerState(waiting=k8s.V1ContainerStateWaiting(reason="CrashLoopBackOff")))
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name="demo-controllers-0", annotations=annotations,
                                  labels=labels or {"app.kubernetes.io/version": "0.1.0"},
                                  deletion_timestamp=STARTED if deleting else None),
        status=k8s.V1PodStatus(
            phase=phase, conditions=[k8s.V1PodCondition(type="Ready", status="True")],
            container_statuses=[k8s.V1ContainerStatus(name="kraft", image="kraftwerk:0.1.0", image_id="", ready=True,
                                                      restart_count=2, state=state)]),
    )


def test_a_running_pod_reports_its_revision_and_its_process_start() -> None:
    facts = _pod_facts(_pod(annotations={"kraftwerk.io/revision": "abc123"}))
    assert facts["phase"] is PodPhase.RUNNING and facts["ready"] is True
    assert facts["started_revision"] == "abc123"
    assert facts["started_at_ms"] == int(STARTED.timestamp() * 1000)
    assert facts["restart_requested"] is False and facts["restarts"] == 2


def test_the_manual_roll_annotation_on_a_pod_requests_its_restart() -> None:
    facts = _pod_facts(_pod(annotations={"kraftwerk.io/manual-rolling-update": "true"}))
    assert facts["restart_requested"] is True
    assert facts.get("started_revision") is None  # started before revisions were recorded: no roll for it


def test_a_pod_being_deleted_or_not_running_reports_no_revision_and_no_start() -> None:
    deleting = _pod_facts(_pod(annotations={"kraftwerk.io/revision": "abc123"}, deleting=True))
    assert deleting["phase"] is PodPhase.PENDING and deleting["ready"] is False
    assert "started_revision" not in deleting and "started_at_ms" not in deleting
    waiting = _pod_facts(_pod(annotations={"kraftwerk.io/revision": "abc123"}, running=False))
    assert "started_at_ms" not in waiting and waiting["message"].startswith("CrashLoopBackOff")


def test_a_pod_running_apache_kafka_reports_kafkas_version() -> None:
    kafka = _pod_facts(_pod(labels={"app.kubernetes.io/version": "4.1.0", "kraftwerk.io/implementation": "apache-kafka"}))
    assert kafka["version"] == "kafka 4.1.0"  # as the local runtime reports a Kafka node
    engine = _pod_facts(_pod(labels={"app.kubernetes.io/version": "0.1.0", "kraftwerk.io/implementation": "kraftwerk"}))
    assert engine["version"] == "0.1.0"
