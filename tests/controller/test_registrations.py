"""BrokerRegistration and ControllerRegistration through the quorum controller, in the "generate,
check records and response, replay" style: the broker epoch is the registration's log offset, a
broker that cannot run a finalized feature level is refused, a new incarnation after the old
session expired cleans up after the old process, and controllers register their supported features."""

from __future__ import annotations

import uuid

from kio.schema.broker_registration.v4.request import BrokerRegistrationRequest, Feature, Listener
from kio.schema.controller_registration.v0 import request as cr
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32, u16

from kraft_engine.metadata import VersionRange
from kraft_engine.records import PartitionChangeRecord, RegisterBrokerRecord, RegisterControllerRecord

from .harness import CLUSTER_ID, LATEST_MV, Harness


def _request(broker_id: int, *, mv_max: int = LATEST_MV,
             supported: dict[str, tuple[int, int]] | None = None) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker_id=BrokerId(broker_id), cluster_id=CLUSTER_ID, incarnation_id=uuid.uuid4(),
        listeners=(Listener(name="PLAINTEXT", host="localhost", port=u16(9092), security_protocol=i16(0)),),
        features=(Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(mv_max)),
                  *(Feature(name=n, min_supported_version=i16(low), max_supported_version=i16(high))
                    for n, (low, high) in sorted((supported or {}).items()))),
        rack="r1", log_dirs=(uuid.uuid4(),),
    )


def test_the_broker_epoch_is_the_offset_of_its_registration_record() -> None:
    cluster = Harness()
    reply = cluster.run(cluster.controller.register_broker(_request(1), now_ms=0))
    # Where raft placed the record (its own control records sit before it in the log).
    [offset] = [b.base_offset for b in cluster.raft.log if any(isinstance(r.record, RegisterBrokerRecord)
                                                               for r in b.records)]
    assert any(not b.records and b.last_offset == offset - 1 for b in cluster.raft.log)
    assert getattr(reply, "broker_epoch", None) == offset
    [record] = cluster.written
    assert isinstance(record, RegisterBrokerRecord)
    assert (record.broker_id, record.broker_epoch, record.fenced, record.rack) == (1, offset, True, "r1")
    registration = cluster.controller.cluster_control.broker(1)
    assert registration is not None and registration.epoch == offset and registration.fenced


def test_a_broker_that_cannot_run_the_finalized_metadata_version_is_refused() -> None:
    cluster = Harness()
    refused = cluster.run(cluster.controller.register_broker(_request(1, mv_max=LATEST_MV - 1), now_ms=0))
    assert getattr(refused, "error_code", None) == ErrorCode.unsupported_version
    assert cluster.written == []
    assert cluster.controller.cluster_control.broker(1) is None


def test_a_broker_that_does_not_support_a_finalized_feature_level_is_refused_with_kafkas_error() -> None:
    # As Kafka's kafka-storage format --release-version 4.0-IV3 finalizes them, on a controller
    # whose software supports them (as Kafka's does).
    cluster = Harness(features={"group.version": 1, "transaction.version": 2},
                      supported={"group.version": (0, 1), "transaction.version": (0, 2)})
    controller = cluster.controller
    silent = cluster.run(controller.register_broker(_request(1), now_ms=0))  # sends no range: supports 0 only
    assert getattr(silent, "error_code", None) == ErrorCode.unsupported_version
    assert str(silent) == ("Unable to register because the broker does not support finalized version 1 of "
                           "group.version. The broker wants a version between 0 and 0, inclusive.")
    older = cluster.run(controller.register_broker(
        _request(1, supported={"group.version": (0, 1), "transaction.version": (0, 1)}), now_ms=0))
    assert getattr(older, "error_code", None) == ErrorCode.unsupported_version
    assert str(older) == ("Unable to register because the broker does not support finalized version 2 of "
                          "transaction.version. The broker wants a version between 0 and 1, inclusive.")
    assert cluster.written == [] and controller.cluster_control.broker(1) is None
    able = cluster.run(controller.register_broker(
        _request(1, supported={"group.version": (0, 1), "transaction.version": (0, 2)}), now_ms=0))
    assert getattr(able, "broker_epoch", None) is not None


def test_a_new_incarnation_after_the_session_expired_cleans_up_after_the_old_process() -> None:
    cluster = Harness().unfenced(1, 2)
    cluster.create_topic("orders", 2, 2)
    before = {p: cluster.partition("orders", p) for p in range(2)}
    assert all(1 in before[p].isr for p in range(2))
    old_epoch = cluster.epochs[1]
    cluster.now_ms += 9000 + 1  # broker.session.timeout.ms passed without a heartbeat from broker 1
    reply = cluster.register(1, incarnation=uuid.uuid4())
    new_epoch = getattr(reply, "broker_epoch", None)
    assert new_epoch is not None and new_epoch > old_epoch
    # The old process's partitions are cleaned first, then the new registration (fenced) is written.
    assert isinstance(cluster.written[-1], RegisterBrokerRecord)
    assert cluster.written[-1].broker_epoch == new_epoch and cluster.written[-1].fenced
    assert {r.partition_id for r in cluster.written if isinstance(r, PartitionChangeRecord)} == {0, 1}
    for p in range(2):
        after = cluster.partition("orders", p)
        assert 1 not in after.isr and after.leader == 2
    registration = cluster.controller.cluster_control.broker(1)
    assert registration is not None and registration.epoch == new_epoch and registration.fenced


def test_controllers_register_with_their_supported_features() -> None:
    cluster = Harness()
    incarnation = uuid.uuid4()
    token = cluster.controller.register_controller(cr.ControllerRegistrationRequest(
        controller_id=i32(2), incarnation_id=incarnation, zk_migration_ready=False,
        listeners=(cr.Listener(name="CONTROLLER", host="localhost", port=u16(9093), security_protocol=i16(0)),),
        features=(cr.Feature(name="metadata.version", min_supported_version=i16(7), max_supported_version=i16(24)),),
    ))
    assert cluster.run(token) is None
    [record] = cluster.written
    assert isinstance(record, RegisterControllerRecord)
    assert (record.controller_id, record.incarnation_id) == (2, incarnation)
    assert dict(cluster.controller.cluster_control.controller_supported())[2] == {
        "metadata.version": VersionRange(7, 24)
    }
