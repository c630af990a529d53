"""UnregisterBroker through the quorum controller: the broker leaves every ISR and leadership first,
then its registration is removed, all in one atomic batch; an unknown broker is refused."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from kraft_engine.records import PartitionChangeRecord, UnregisterBrokerRecord

from .harness import Harness


def test_unregistering_a_broker_moves_its_leaderships_and_isr_then_removes_it() -> None:
    cluster = Harness().unfenced(1, 2, 3)
    assert cluster.create_topic("orders", 3, 2).error_code == ErrorCode.none
    led = {p for p in range(3) if cluster.partition("orders", p).leader == 2}
    member = {p for p in range(3) if 2 in cluster.partition("orders", p).isr}
    assert led and member
    epoch = cluster.epochs[2]

    assert cluster.run(cluster.controller.unregister_broker(2)) is None

    changes = [r for r in cluster.written if isinstance(r, PartitionChangeRecord)]
    assert cluster.written[-1] == UnregisterBrokerRecord(broker_id=2, broker_epoch=epoch)
    assert {r.partition_id for r in changes} == member
    assert cluster.controller.cluster_control.broker(2) is None
    for p in range(3):
        registration = cluster.partition("orders", p)
        assert 2 not in registration.isr
        assert registration.leader != 2
        if p in led:
            assert registration.leader in (1, 3)


def test_unregistering_an_unknown_broker_is_refused_and_writes_nothing() -> None:
    cluster = Harness().unfenced(1)
    result = cluster.run(cluster.controller.unregister_broker(7))
    assert getattr(result, "error_code", None) == ErrorCode.broker_id_not_registered
    assert cluster.written == []
    assert cluster.controller.cluster_control.broker(1) is not None
