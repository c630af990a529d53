"""metadata.version: the levels operators name in `kraft storage format` / `kraft features`, and
the record versions the controller must write at each level."""

import uuid

import pytest

from kraft_engine.records import metadata_version as mv
from kraft_engine.records.metadata_records import BrokerRegistrationChangeRecord
from kraft_engine.records.metadata_registry import lowest_version_holding
from kraft_engine.records.metadata_version import MetadataVersion, from_version_string, is_metadata_changed


def test_levels_and_names_follow_kafka() -> None:
    table = {v.feature_level: (str(v), v.did_metadata_change) for v in mv.METADATA_VERSIONS}
    assert table[7] == ("3.3-IV3", True)
    assert table[13] == ("3.6-IV1", True)
    assert table[17] == ("3.7-IV2", True)
    assert table[21] == ("3.9-IV0", False)
    assert table[23] == ("4.0-IV1", True)
    assert table[25] == ("4.0-IV3", False)
    assert table[26] == ("4.1-IV0", False)
    assert table[29] == ("4.2-IV1", False)
    assert list(table) == list(range(7, 30))


def test_engine_range_and_default() -> None:
    assert MetadataVersion.MINIMUM is mv.IBP_3_3_IV3
    assert MetadataVersion.LATEST is mv.IBP_4_2_IV1
    assert mv.latest() is mv.IBP_4_2_IV1
    assert mv.latest(unstable_enabled=True) is mv.IBP_4_2_IV1
    assert all(v.is_production for v in mv.METADATA_VERSIONS)


def test_from_feature_level() -> None:
    assert MetadataVersion.from_feature_level(21) is mv.IBP_3_9_IV0
    with pytest.raises(ValueError, match=r"feature level 6\. Valid feature levels are from 7 to 29"):
        MetadataVersion.from_feature_level(6)
    with pytest.raises(ValueError, match=r"feature level 30 \(4.3-IV0, which this engine does not implement\)"):
        MetadataVersion.from_feature_level(30)


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("3.9-IV0", 21),
        ("3.9", 21),
        ("3.7", 19),  # the latest IV of 3.7
        ("3.7-IV2", 17),
        ("4.0", 25),
        ("3.9.1", 21),
        ("3.3", 7),
        ("21", 21),
        (" 4.2-IV1 ", 29),
    ],
)
def test_parse_version_strings(text: str, level: int) -> None:
    assert from_version_string(text).feature_level == level


@pytest.mark.parametrize("text", ["3.2", "3.3-IV2", "4.3", "4.3-IV0", "99", "banana", "", "3.9-IV9"])
def test_unknown_version_strings_list_the_supported_ones(text: str) -> None:
    with pytest.raises(ValueError, match=r"Supported metadata\.version are: 3\.3-IV3, 3\.4-IV0, .*, 4\.2-IV1$"):
        from_version_string(text)


@pytest.mark.parametrize("text", ["4.3", "4.3-IV0", "4.3.1", "30"])
def test_newer_kafka_versions_are_named_as_not_implemented(text: str) -> None:
    with pytest.raises(ValueError, match=r"\(Kafka's 4\.3-IV0, level 30, which this engine does not implement\)"):
        from_version_string(text)


def test_ordering_and_comparison() -> None:
    assert mv.IBP_3_3_IV3 < mv.IBP_3_9_IV0 < mv.IBP_4_2_IV1
    assert mv.IBP_3_9_IV0.is_at_least(mv.IBP_3_7_IV2)
    assert mv.IBP_3_6_IV0.is_less_than(mv.IBP_3_6_IV1)
    assert mv.IBP_3_9_IV0.level == mv.IBP_3_9_IV0.feature_level == 21


def test_is_metadata_changed() -> None:
    assert not is_metadata_changed(mv.IBP_3_9_IV0, mv.IBP_3_9_IV0)
    # 3.8-IV0 .. 4.0-IV0 changed nothing.
    assert not is_metadata_changed(mv.IBP_4_0_IV0, mv.IBP_3_7_IV2)
    assert not is_metadata_changed(mv.IBP_3_7_IV2, mv.IBP_4_0_IV0)
    # 4.0-IV1 changed metadata (ELR); so did 3.7-IV2 (directories).
    assert is_metadata_changed(mv.IBP_4_0_IV1, mv.IBP_4_0_IV0)
    assert is_metadata_changed(mv.IBP_4_2_IV1, mv.IBP_3_9_IV0)
    assert is_metadata_changed(mv.IBP_3_7_IV2, mv.IBP_3_7_IV1)
    assert not is_metadata_changed(mv.IBP_4_2_IV1, mv.IBP_4_0_IV1)


def test_feature_gates() -> None:
    assert not mv.IBP_3_6_IV0.is_metadata_transaction_supported
    assert mv.IBP_3_6_IV1.is_metadata_transaction_supported
    assert not mv.IBP_3_5_IV1.is_scram_supported
    assert mv.IBP_3_5_IV2.is_scram_supported
    assert not mv.IBP_3_6_IV1.is_delegation_token_supported
    assert mv.IBP_3_6_IV2.is_delegation_token_supported
    assert not mv.IBP_3_6_IV2.is_controller_registration_supported
    assert mv.IBP_3_7_IV0.is_controller_registration_supported
    assert mv.IBP_3_5_IV2.is_leader_epoch_bump_required_on_isr_shrink
    assert not mv.IBP_3_6_IV0.is_leader_epoch_bump_required_on_isr_shrink
    assert mv.MINIMUM.is_in_controlled_shutdown_state_supported
    assert mv.MINIMUM.is_broker_registration_change_record_supported
    assert mv.MINIMUM.is_no_op_record_supported
    with pytest.raises(ValueError, match="controller registration"):
        _ = mv.IBP_3_6_IV2.register_controller_record_version
    assert mv.IBP_3_7_IV0.register_controller_record_version == 0


@pytest.mark.parametrize(
    ("version", "register_broker", "partition"),
    [
        (mv.IBP_3_3_IV3, 1, 0),
        (mv.IBP_3_4_IV0, 2, 0),
        (mv.IBP_3_7_IV1, 2, 0),
        (mv.IBP_3_7_IV2, 3, 1),
        (mv.IBP_4_0_IV0, 3, 1),
        (mv.IBP_4_0_IV1, 3, 2),
        (mv.IBP_4_2_IV1, 3, 2),
    ],
)
def test_record_versions_by_level(version: MetadataVersion, register_broker: int, partition: int) -> None:
    assert version.register_broker_record_version == register_broker
    assert version.partition_record_version == partition
    assert version.partition_change_record_version == partition
    assert version.is_directory_assignment_supported == (partition >= 1)
    assert version.is_elr_supported == (partition >= 2)


def test_inter_broker_request_versions() -> None:
    assert [v.fetch_request_version for v in (mv.IBP_3_3_IV3, mv.IBP_3_5_IV0, mv.IBP_3_5_IV1)] == [13, 14, 15]
    assert [v.fetch_request_version for v in (mv.IBP_3_7_IV4, mv.IBP_3_9_IV0, mv.IBP_4_1_IV1)] == [16, 17, 18]
    assert [v.list_offset_request_version for v in (mv.MINIMUM, mv.IBP_3_5_IV0, mv.IBP_3_9_IV0)] == [7, 8, 9]
    assert [v.list_offset_request_version for v in (mv.IBP_4_0_IV3, mv.IBP_4_2_IV1)] == [10, 11]


def test_broker_registration_change_is_versioned_by_content() -> None:
    fence = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, fenced=1)
    shutdown = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, in_controlled_shutdown=1)
    log_dirs = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, log_dirs=())
    assert lowest_version_holding(fence) == 0
    assert lowest_version_holding(shutdown) == 1
    assert lowest_version_holding(log_dirs) == 0
    with_dirs = BrokerRegistrationChangeRecord(broker_id=1, broker_epoch=5, log_dirs=(uuid.UUID(int=500),))
    assert lowest_version_holding(with_dirs) == 2
