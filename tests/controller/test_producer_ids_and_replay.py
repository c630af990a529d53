"""AllocateProducerIds, and replay of the record kinds the controller does not generate yet
(ACLs, SCRAM credentials, delegation tokens, client quotas) as a log written by Kafka holds them."""

from __future__ import annotations

import random
import uuid

import pytest
from kio.schema.allocate_producer_ids.v0.request import AllocateProducerIdsRequest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i64

from kraft_engine.controller import (
    ControllerApiError,
    ControllerFault,
    QuorumController,
    RecordAndVersion,
)
from kraft_engine.metadata import VersionRange
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import (
    AccessControlEntryRecord,
    ClientQuotaRecord,
    DelegationTokenRecord,
    EntityData,
    FeatureLevelRecord,
    ProducerIdsRecord,
    RemoveAccessControlEntryRecord,
    RemoveDelegationTokenRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    decode_metadata_record,
    encode_metadata_record,
)

from .harness import CLUSTER_ID, LATEST_MV, FakeRaft, Harness


def _allocate(h: Harness, broker: int, epoch: int | None = None) -> object:
    return h.run(h.controller.allocate_producer_ids(AllocateProducerIdsRequest(
        broker_id=BrokerId(broker), broker_epoch=i64(h.epochs[broker] if epoch is None else epoch))))


def test_producer_id_blocks_are_allocated_in_order_and_survive_replay() -> None:
    h = Harness().unfenced(1, 2)
    first = _allocate(h, 1)
    assert (first.error_code, first.producer_id_start, first.producer_id_len) == (ErrorCode.none, 0, 1000)  # type: ignore[attr-defined]
    assert h.written == [ProducerIdsRecord(broker_id=1, broker_epoch=h.epochs[1], next_producer_id=1000)]
    second = _allocate(h, 2)
    assert second.producer_id_start == 1000  # type: ignore[attr-defined]
    stale = _allocate(h, 1, epoch=h.epochs[1] - 1)
    assert isinstance(stale, ControllerApiError) and stale.error_code == ErrorCode.stale_broker_epoch
    assert h.controller.producer_ids_control.next_producer_id() == 2000


def _standby() -> QuorumController:
    controller = QuorumController(
        node_id=3001, raft=FakeRaft(), quorum_node_ids=(3000, 3001),
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=LATEST_MV), 0)],
        local_supported_features={"metadata.version": VersionRange(7, LATEST_MV)},
        cluster_id=CLUSTER_ID, rng=random.Random(1),
    )
    controller.handle_leader_change(leader_id=3000, epoch=1, now_ms=0, raft_is_leader=True)
    return controller


def _from_the_wire(*records: object) -> tuple[object, ...]:
    """Each record through Kafka's ApiMessageAndVersion framing, as a Kafka-written log holds it."""
    return tuple(decode_metadata_record(encode_metadata_record(r, 0))[0] for r in records)  # type: ignore[arg-type]


def test_a_standby_replays_security_quota_and_producer_id_records() -> None:
    controller = _standby()
    acl_id, token = uuid.uuid4(), "token-1"
    user = EntityData(entity_type="user", entity_name="alice")
    records = _from_the_wire(
        FeatureLevelRecord(name="metadata.version", feature_level=LATEST_MV),
        AccessControlEntryRecord(id=acl_id, resource_type=2, resource_name="orders", pattern_type=3,
                                 principal="User:alice", host="*", operation=3, permission_type=3),
        UserScramCredentialRecord(name="alice", mechanism=1, salt=b"s", stored_key=b"k", server_key=b"v",
                                  iterations=4096),
        DelegationTokenRecord(owner="User:alice", requester="User:alice", renewers=(), issue_timestamp=1,
                              max_timestamp=2, expiration_timestamp=2, token_id=token),
        ClientQuotaRecord(entity=(user,), key="producer_byte_rate", value=1024.0, remove=False),
        ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=1000),
    )
    controller.handle_commit(CommittedBatch(0, 1, records, len(records) - 1, append_timestamp_ms=10))
    assert list(controller.acl_control.acls()) == [acl_id]
    assert list(controller.scram_control.credentials()) == [("alice", 1)]
    assert list(controller.delegation_token_control.tokens()) == [token]
    assert controller.client_quota_control.quotas() == {(("user", "alice"),): {"producer_byte_rate": 1024.0}}
    assert controller.producer_ids_control.next_producer_id() == 1000
    removals = _from_the_wire(
        RemoveAccessControlEntryRecord(id=acl_id),
        RemoveUserScramCredentialRecord(name="alice", mechanism=1),
        RemoveDelegationTokenRecord(token_id=token),
        ClientQuotaRecord(entity=(user,), key="producer_byte_rate", value=0.0, remove=True),
    )
    controller.handle_commit(CommittedBatch(len(records), 1, removals, len(records) + len(removals) - 1))
    assert controller.acl_control.acls() == {} and controller.scram_control.credentials() == {}
    assert controller.delegation_token_control.tokens() == {} and controller.client_quota_control.quotas() == {}


@pytest.mark.parametrize("bad", [
    RemoveAccessControlEntryRecord(id=uuid.uuid4()),
    RemoveUserScramCredentialRecord(name="nobody", mechanism=1),
    ProducerIdsRecord(broker_id=1, broker_epoch=5, next_producer_id=0),
    ClientQuotaRecord(entity=(EntityData(entity_type="group", entity_name="g"),), key="k", value=1.0, remove=False),
])
def test_inconsistent_records_stop_the_controller_and_count_as_metadata_errors(bad: object) -> None:
    controller = _standby()
    with pytest.raises(ControllerFault):
        controller.handle_commit(CommittedBatch(0, 1, (bad,), 0))
    assert controller.metrics(now_ms=0).metadata_error_count == 1
