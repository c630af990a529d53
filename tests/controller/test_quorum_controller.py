"""The quorum controller end to end: activation, bootstrap, failover, UpdateFeatures."""

from __future__ import annotations

import random

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16

from kraft_engine.controller.event_handling import ControllerFault
from kraft_engine.controller.quorum_controller import QuorumController
from kraft_engine.controller.results import ApiError, RecordAndVersion
from kraft_engine.metadata import VersionRange
from kraft_engine.raft import CommittedBatch
from kraft_engine.records import (
    AbortTransactionRecord,
    BeginTransactionRecord,
    EndTransactionRecord,
    FeatureLevelRecord,
)

from .harness import FakeRaft


def _controller(*, mv: int = 25, quorum: tuple[int, ...] = (1,), kraft_hook=None,
                raft: FakeRaft | None = None) -> QuorumController:
    return QuorumController(
        node_id=1,
        raft=raft or FakeRaft(),
        cluster_id="MkU3OEVBNTcwNTJENDM2Qg",
        rng=random.Random(7),
        quorum_node_ids=quorum,
        bootstrap_records=[RecordAndVersion(FeatureLevelRecord(name="metadata.version", feature_level=mv), 0)],
        local_supported_features={
            "metadata.version": VersionRange(7, 25),
            "kraft.version": VersionRange(0, 1),
            "group.version": VersionRange(0, 1),
        },
        kraft_version_upgrader=kraft_hook,
    )


def _raft(controller: QuorumController) -> FakeRaft:
    raft = controller.events._raft
    assert isinstance(raft, FakeRaft)
    return raft


def _commit_all(controller: QuorumController) -> list[tuple[int, object]]:
    effects = controller.take_effects()
    _raft(controller).commit(controller)
    return effects.completed + controller.take_effects().completed


def _update(controller: QuorumController, feature: str, level: int, *, upgrade_type: int = 1,
            validate_only: bool = False) -> ApiError:
    token = controller.update_features(UpdateFeaturesRequest(
        feature_updates=(FeatureUpdateKey(feature=feature, max_version_level=i16(level), upgrade_type=i8(upgrade_type)),),
        validate_only=validate_only,
    ))
    done = dict(_commit_all(controller))
    result = done[token]
    assert isinstance(result, ApiError)
    return result


def test_activation_on_an_empty_log_writes_the_bootstrap_records_in_a_transaction() -> None:
    raft = FakeRaft()
    raft.control_batch(1)  # the LeaderChangeMessage at offset 0
    controller = _controller(raft=raft)
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    [_, append, _] = raft.log
    assert [type(r.record) for r in append.records] == [BeginTransactionRecord, FeatureLevelRecord, EndTransactionRecord]
    assert append.base_offset == 1 and append.epoch == 1  # where raft put it, after its own record
    assert controller.finalized_features() == {}  # not committed yet
    raft.commit(controller)
    assert controller.finalized_features() == {"metadata.version": 25}
    assert controller.active_controller_count() == 1


def test_before_3_6_iv1_the_bootstrap_records_are_one_atomic_batch() -> None:
    controller = _controller(mv=12)
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    [append, _] = _raft(controller).log
    assert [type(r.record) for r in append.records] == [FeatureLevelRecord]


def test_a_standby_replays_and_a_new_leader_aborts_a_dangling_transaction() -> None:
    raft = FakeRaft()
    controller = _controller(raft=raft)
    begin = BeginTransactionRecord(name="Bootstrap records")
    controller.handle_commit(CommittedBatch(0, 1, (begin,), 0))
    controller.handle_commit(CommittedBatch(1, 1, (FeatureLevelRecord(name="metadata.version", feature_level=25),), 1))
    assert controller.last_stable_offset() == -1  # held before the open transaction
    raft.control_batch(2)
    raft.control_batch(2)
    controller.handle_leader_change(leader_id=1, epoch=2, now_ms=0, raft_is_leader=True)
    [_, _, append, _] = raft.log
    assert append.base_offset == 2
    assert [type(r.record) for r in append.records] == [AbortTransactionRecord]
    assert controller.feature_control.metadata_version() is None  # the half transaction is undone


def test_losing_leadership_resigns_and_reverts_uncommitted_features() -> None:
    controller = _controller()
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    _commit_all(controller)
    token = controller.update_features(UpdateFeaturesRequest(
        feature_updates=(FeatureUpdateKey(feature="group.version", max_version_level=i16(1)),),
    ))
    assert controller.feature_control.finalized_features()["group.version"] == 1
    controller.handle_leader_change(leader_id=2, epoch=2, now_ms=0, raft_is_leader=False)
    effects = controller.take_effects()
    assert effects.resign_epoch == 1
    assert [(f.token, f.error.error_code) for f in effects.failed] == [(token, ErrorCode.not_controller)]
    assert "group.version" not in controller.feature_control.finalized_features()
    assert controller.active_controller_count() == 0


def test_update_features_upgrade_validate_only_and_downgrade_rules() -> None:
    controller = _controller(mv=20)
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    _commit_all(controller)
    assert _update(controller, "metadata.version", 25, validate_only=True) == ApiError.NONE
    assert controller.finalized_features()["metadata.version"] == 20
    assert _update(controller, "metadata.version", 25) == ApiError.NONE
    assert controller.finalized_features()["metadata.version"] == 25

    unsafe = _update(controller, "metadata.version", 21, upgrade_type=2)
    assert unsafe == ApiError(
        ErrorCode.invalid_update_version,
        "Invalid metadata.version 21. Refusing to perform the requested downgrade because it might delete "
        "metadata information.",
    )
    assert _update(controller, "metadata.version", 24, upgrade_type=2) == ApiError.NONE  # 25 -> 24 changed nothing
    no_type = _update(controller, "metadata.version", 20)
    assert "without setting the upgrade type" in (no_type.message or "")
    too_new = _update(controller, "metadata.version", 26)
    assert too_new.message == (
        "Invalid update version 26 for feature metadata.version. Local controller 1 only supports versions 7-25"
    )
    unknown = _update(controller, "unknown.feature", 1)
    assert unknown.message == (
        "Invalid update version 1 for feature unknown.feature. Local controller 1 does not support this feature."
    )
    assert controller.finalized_features()["metadata.version"] == 24


def test_no_feature_changes_while_a_quorum_controller_has_not_registered() -> None:
    controller = _controller(quorum=(1, 2, 3))
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    _commit_all(controller)
    refused = _update(controller, "group.version", 1)
    assert refused.message == (
        "Invalid update version 1 for feature group.version. controller 2 has not registered, and may not "
        "support this feature"
    )


def test_feature_check_follows_the_voter_set_after_a_voter_change() -> None:
    controller = _controller(quorum=(1,))
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    _commit_all(controller)
    assert _update(controller, "group.version", 1, validate_only=True) == ApiError.NONE
    # Controller 2 joins the quorum (AddRaftVoter) but has not registered yet.
    controller.set_quorum_node_ids((1, 2))
    refused = _update(controller, "group.version", 1)
    assert refused.message == (
        "Invalid update version 1 for feature group.version. controller 2 has not registered, and may not "
        "support this feature"
    )
    # Once it leaves the quorum again, nothing waits for it.
    controller.set_quorum_node_ids((1,))
    assert _update(controller, "group.version", 1) == ApiError.NONE
    assert controller.finalized_features()["group.version"] == 1


def test_kraft_version_goes_through_the_raft_hook() -> None:
    calls: list[tuple[int, bool]] = []

    def hook(level: int, validate_only: bool) -> str | None:
        calls.append((level, validate_only))
        return None

    controller = _controller(kraft_hook=hook)
    controller.handle_leader_change(leader_id=1, epoch=1, now_ms=0, raft_is_leader=True)
    _commit_all(controller)
    log_before = list(_raft(controller).log)
    token = controller.update_features(UpdateFeaturesRequest(
        feature_updates=(FeatureUpdateKey(feature="kraft.version", max_version_level=i16(1)),),
    ))
    effects = controller.take_effects()
    assert _raft(controller).log == log_before and effects.completed == [(token, ApiError.NONE)]
    assert calls == [(1, False)]


def test_a_feature_level_this_controller_cannot_run_is_a_fatal_replay_error() -> None:
    controller = _controller()
    with pytest.raises(ControllerFault, match="only supports versions 7-25"):
        controller.handle_commit(
            CommittedBatch(0, 1, (FeatureLevelRecord(name="metadata.version", feature_level=30),), 0)
        )


def test_bootstrap_without_metadata_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"does not set metadata\.version"):
        QuorumController(node_id=1, raft=FakeRaft(), quorum_node_ids=(1,), bootstrap_records=[], local_supported_features={},
                         cluster_id="x", rng=random.Random(0))
