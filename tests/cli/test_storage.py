"""`kraft storage`: random-uuid, info and format behave like Kafka's kafka-storage, including every
refusal, and a refused format leaves the disks untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.k_raft_version_record.v0 import KRaftVersionRecord
from kio.schema.snapshot_footer_record.v0 import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0 import SnapshotHeaderRecord
from kio.schema.voters_record.v0 import VotersRecord

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import from_kafka_str, to_kafka_str
from kraft_engine.records import (
    FeatureLevelRecord,
    decode_control_batch,
    decode_metadata_record,
    decode_records,
    metadata_version,
)
from kraft_engine.server.config import load_config
from kraft_engine.storage.formatter import (
    BOOTSTRAP_SNAPSHOT_ID,
    BOOTSTRAP_SNAPSHOT_NAME,
    CLUSTER_METADATA_DIR_NAME,
    FormatRequest,
    FormatterError,
)
from kraft_engine.storage.meta_properties import read_meta_properties
from kraft_engine.storage.snapshots import SnapshotReader

CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qk"
DIR_1 = "JEXY6aqzQY-32P5TStzaFg"
DIR_2 = "MvDxzVmcRsaTz33bUuRU6A"
DIR_3 = "07R5amHmR32VDA6jHkGbTA"
INITIAL = f"1@localhost:19093:{DIR_1},2@localhost:19094:{DIR_2},3@localhost:19095:{DIR_3}"


# What `kafka-storage format` finalizes besides metadata.version for 4.2-IV1, the engine's latest
# production release: on a controller, Kafka's defaults; on a node that also runs the engine's
# broker, what that broker supports of them, i.e. ELR only (feature_versions._BROKER_MAX_LEVELS).
LATEST_RELEASE_FEATURES: list[FeatureLevelRecord] = [
    FeatureLevelRecord(name="eligible.leader.replicas.version", feature_level=1),
    FeatureLevelRecord(name="group.version", feature_level=1),
    FeatureLevelRecord(name="share.version", feature_level=1),
    FeatureLevelRecord(name="transaction.version", feature_level=2),
]


def write_config(tmp_path: Path, *, roles: str = "controller", node_id: int = 1, **extra: str | None) -> Path:
    props = {
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.listener.names": "CONTROLLER",
        "log.dirs": f"{tmp_path}/meta,{tmp_path}/data",
        "metadata.log.dir": f"{tmp_path}/meta",
    }
    if "controller" in roles:
        props["listeners"] = f"CONTROLLER://localhost:{19092 + node_id}"
        if roles != "controller":
            props["listeners"] = f"PLAINTEXT://localhost:{29092 + node_id}," + props["listeners"]
    else:
        props["listeners"] = f"PLAINTEXT://localhost:{29092 + node_id}"
    if "controller.quorum.voters" not in extra:
        props["controller.quorum.bootstrap.servers"] = "localhost:19093"
    for key, value in extra.items():
        if value is None:
            props.pop(key, None)
        else:
            props[key] = value
    path = tmp_path / "server.properties"
    path.write_text("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def storage(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["storage", *args])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def fmt(capsys: pytest.CaptureFixture[str], config: Path, *flags: str) -> tuple[int, str, str]:
    return storage(capsys, "format", "-c", str(config), "-t", CLUSTER_ID, *flags)


def snapshot_records(meta_dir: Path) -> list[object]:
    """The records of the bootstrap snapshot, read through the engine's validating snapshot reader."""
    assert (meta_dir / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME).is_file()
    records: list[object] = []
    with SnapshotReader(meta_dir / CLUSTER_METADATA_DIR_NAME, BOOTSTRAP_SNAPSHOT_ID) as reader:
        batches = list(reader.batches())
    for header, raw in batches:
        if header.is_control:
            records.extend(r.record for r in decode_control_batch(raw))
        else:
            records.extend(decode_metadata_record(r.value or b"")[0] for r in decode_records(raw))
    return records


def on_disk(tmp_path: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.name != "server.properties")


# --- random-uuid --------------------------------------------------------------------------------


def test_random_uuid_prints_a_kafka_uuid(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = storage(capsys, "random-uuid")
    text = out.strip()
    assert rc == 0
    assert len(text) == 22 and not text.startswith("-")
    assert to_kafka_str(from_kafka_str(text)) == text


# --- format: static quorum -------------------------------------------------------------------------


def test_static_controller_gets_meta_properties_everywhere_and_a_snapshot_in_the_metadata_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, out, err = fmt(capsys, config, "--release-version", "3.9-IV0")
    assert rc == 0, err
    assert out.splitlines() == [
        f"Formatting data directory {tmp_path}/data with metadata.version 3.9-IV0.",
        f"Formatting metadata directory {tmp_path}/meta with metadata.version 3.9-IV0.",
    ]
    metas = {d: read_meta_properties(tmp_path / d) for d in ("meta", "data")}
    for meta in metas.values():
        assert (meta.version, meta.cluster_id, meta.node_id) == (1, CLUSTER_ID, 1)
        assert meta.directory_id is not None
    assert metas["meta"].directory_id != metas["data"].directory_id
    assert not (tmp_path / "data" / CLUSTER_METADATA_DIR_NAME).exists()
    records = snapshot_records(tmp_path / "meta")
    assert isinstance(records[0], SnapshotHeaderRecord)
    assert records[1] == FeatureLevelRecord(name="metadata.version", feature_level=21)
    assert isinstance(records[2], SnapshotFooterRecord)
    assert len(records) == 3  # kraft.version 0: no KRaftVersionRecord, no voters


def test_default_release_version_is_the_latest_production_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, out, _ = fmt(capsys, config)
    latest = metadata_version.latest()
    assert rc == 0
    assert f"with metadata.version {latest}." in out
    assert FeatureLevelRecord(name="metadata.version", feature_level=latest.level) in snapshot_records(tmp_path / "meta")


@pytest.mark.parametrize(("given", "level"), [("3.9", 21), ("3.9-IV0", 21), ("21", 21), ("3.3-IV3", 7)])
def test_release_version_accepts_names_releases_and_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, level: int
) -> None:
    config = write_config(tmp_path, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, _, err = fmt(capsys, config, "-r", given)
    assert rc == 0, err
    assert FeatureLevelRecord(name="metadata.version", feature_level=level) in snapshot_records(tmp_path / "meta")


@pytest.mark.parametrize("given", ["3.2-IV0", "9.9", "6", "banana"])
def test_release_version_out_of_range_is_refused_with_the_supported_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    config = write_config(tmp_path, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, _, err = fmt(capsys, config, "-r", given)
    assert rc == 1
    assert "3.3-IV3" in err and str(metadata_version.latest(unstable_enabled=True)) in err
    assert on_disk(tmp_path) == []


@pytest.mark.parametrize(
    ("roles", "flags"),
    [("controller", ["-s"]), ("controller", ["-I", INITIAL]), ("controller", ["-N"]), ("broker", ["-N"])],
)
def test_a_dynamic_quorum_needs_metadata_version_3_9(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], roles: str, flags: list[str]
) -> None:
    config = write_config(tmp_path, roles=roles, node_id=1 if roles == "controller" else 4)
    rc, _, err = fmt(capsys, config, "-r", "3.8-IV0", *flags)
    assert rc == 1
    assert "kraft.version could not be set to 1 because it depends on metadata.version level 21" in err
    assert on_disk(tmp_path) == []
    rc, _, err = fmt(capsys, config, "-r", "3.9-IV0", *flags)
    assert rc == 0, err


def test_a_broker_without_quorum_flags_keeps_kraft_version_0_and_any_metadata_version(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, roles="broker", node_id=4)
    rc, out, err = fmt(capsys, config, "-r", "3.3-IV3")
    assert rc == 0, err
    assert f"Formatting metadata directory {tmp_path}/meta with metadata.version 3.3-IV3." in out


def test_a_broker_gets_meta_properties_but_no_bootstrap_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, roles="broker", node_id=4)
    rc, out, err = fmt(capsys, config)
    assert rc == 0, err
    assert read_meta_properties(tmp_path / "meta").node_id == 4
    assert not (tmp_path / "meta" / CLUSTER_METADATA_DIR_NAME).exists()
    assert "Formatting metadata directory" in out


# --- format: dynamic quorum ------------------------------------------------------------------------


def test_initial_controllers_pin_the_voter_set_and_this_nodes_directory_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, node_id=2)
    rc, out, err = fmt(capsys, config, "--initial-controllers", INITIAL, "-r", "3.9")
    assert rc == 0, err
    assert f"Formatting dynamic metadata voter directory {tmp_path}/meta with metadata.version 3.9-IV0." in out
    assert to_kafka_str(read_meta_properties(tmp_path / "meta").directory_id) == DIR_2  # type: ignore[arg-type]
    assert to_kafka_str(read_meta_properties(tmp_path / "data").directory_id) not in (DIR_1, DIR_2, DIR_3)  # type: ignore[arg-type]
    header, kraft_version, voters, feature, footer = snapshot_records(tmp_path / "meta")
    assert isinstance(header, SnapshotHeaderRecord) and isinstance(footer, SnapshotFooterRecord)
    assert kraft_version == KRaftVersionRecord(version=0, k_raft_version=1)  # type: ignore[arg-type]
    assert feature == FeatureLevelRecord(name="metadata.version", feature_level=21)
    assert isinstance(voters, VotersRecord)
    assert [(v.voter_id, to_kafka_str(v.voter_directory_id)) for v in voters.voters] == [  # type: ignore[arg-type]
        (1, DIR_1),
        (2, DIR_2),
        (3, DIR_3),
    ]
    for voter, port in zip(voters.voters, (19093, 19094, 19095), strict=True):
        assert [(e.name, e.host, e.port) for e in voter.endpoints] == [("CONTROLLER", "localhost", port)]
        assert (voter.k_raft_version_feature.min_supported_version, voter.k_raft_version_feature.max_supported_version) == (0, 1)


def test_a_controller_missing_from_initial_controllers_is_a_non_voter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, node_id=4)
    rc, out, err = fmt(capsys, config, "-I", INITIAL)
    assert rc == 0, err
    assert f"Formatting dynamic metadata directory {tmp_path}/meta" in out
    assert to_kafka_str(read_meta_properties(tmp_path / "meta").directory_id) not in (DIR_1, DIR_2, DIR_3)  # type: ignore[arg-type]


def test_standalone_makes_this_node_the_only_voter_at_its_advertised_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, node_id=1, **{"advertised.listeners": "CONTROLLER://c1.example:9999"})
    rc, out, err = fmt(capsys, config, "--standalone")
    assert rc == 0, err
    assert "Formatting dynamic metadata voter directory" in out
    records = snapshot_records(tmp_path / "meta")
    voters = next(r for r in records if isinstance(r, VotersRecord))
    (voter,) = voters.voters
    assert voter.voter_id == 1
    assert voter.voter_directory_id == read_meta_properties(tmp_path / "meta").directory_id
    assert [(e.name, e.host, e.port) for e in voter.endpoints] == [("CONTROLLER", "c1.example", 9999)]


def test_no_initial_controllers_writes_kraft_version_1_without_voters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, node_id=5)
    rc, _, err = fmt(capsys, config, "--no-initial-controllers")
    assert rc == 0, err
    records = snapshot_records(tmp_path / "meta")
    assert KRaftVersionRecord(version=0, k_raft_version=1) in records  # type: ignore[arg-type]
    assert not any(isinstance(r, VotersRecord) for r in records)


@pytest.mark.parametrize("flags", [["-I", INITIAL], ["-N"]])
def test_a_broker_may_be_formatted_with_dynamic_flags_but_gets_no_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    config = write_config(tmp_path, roles="broker", node_id=4)
    rc, out, err = fmt(capsys, config, *flags)
    assert rc == 0, err
    assert "dynamic metadata directory" in out or "metadata directory" in out
    assert read_meta_properties(tmp_path / "meta").node_id == 4
    assert not (tmp_path / "meta" / CLUSTER_METADATA_DIR_NAME).exists()


def test_a_combined_node_formatted_standalone_gets_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, roles="broker,controller", node_id=1)
    rc, _, err = fmt(capsys, config, "-s")
    assert rc == 0, err
    voters = next(r for r in snapshot_records(tmp_path / "meta") if isinstance(r, VotersRecord))
    assert [(e.name, e.port) for e in voters.voters[0].endpoints] == [("CONTROLLER", 19093)]


def test_the_formatter_itself_refuses_two_quorum_flags(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path))
    with pytest.raises(FormatterError, match="mutually exclusive"):
        FormatRequest.from_config(config, cluster_id=CLUSTER_ID, standalone=True, no_initial_controllers=True)
    with pytest.raises(FormatterError, match="mutually exclusive"):
        FormatRequest.from_config(config, cluster_id=CLUSTER_ID, standalone=True, initial_controllers=INITIAL)


# --- format: every combination of role, quorum configuration and quorum flag ----------------------

_QUORUM_FLAGS = {"none": [], "-s": ["-s"], "-I": ["-I", INITIAL], "-N": ["-N"]}


@pytest.mark.parametrize("flag", list(_QUORUM_FLAGS))
@pytest.mark.parametrize("quorum", ["static", "dynamic"])
@pytest.mark.parametrize("roles", ["controller", "broker", "broker,controller"])
def test_every_role_quorum_and_flag_combination(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], roles: str, quorum: str, flag: str
) -> None:
    is_controller = "controller" in roles
    extra = {"controller.quorum.voters": "1@localhost:19093"} if quorum == "static" else {}
    config = write_config(tmp_path, roles=roles, node_id=1 if is_controller else 4, **extra)
    rc, out, err = fmt(capsys, config, *_QUORUM_FLAGS[flag])

    if quorum == "static" and flag != "none":
        refusal: str | None = "You cannot specify controller.quorum.voters and format the node with"
    elif quorum == "dynamic" and flag == "none" and is_controller:
        refusal = "Because controller.quorum.voters is not set on this controller, you must specify one of"
    elif flag == "-s" and not is_controller:
        refusal = "You can only use --standalone on a controller."
    else:
        refusal = None
    if refusal is not None:
        assert rc == 1 and refusal in err
        assert on_disk(tmp_path) == []
        return

    assert rc == 0, err
    assert read_meta_properties(tmp_path / "meta").cluster_id == CLUSTER_ID
    assert read_meta_properties(tmp_path / "data").cluster_id == CLUSTER_ID
    assert (f"Formatting data directory {tmp_path}/data") in out
    snapshot = tmp_path / "meta" / CLUSTER_METADATA_DIR_NAME / BOOTSTRAP_SNAPSHOT_NAME
    assert snapshot.exists() == is_controller  # only controllers get the bootstrap snapshot
    if not is_controller:
        return
    records = snapshot_records(tmp_path / "meta")
    kinds = [type(r).__name__ for r in records]
    expected_voters = {"none": None, "-s": [1], "-I": [1, 2, 3], "-N": None}[flag]
    assert kinds[0] == "SnapshotHeaderRecord" and kinds[-1] == "SnapshotFooterRecord"
    features = [r for r in records if isinstance(r, FeatureLevelRecord)]
    # metadata.version first, then every feature the release starts above level 0, by name.
    assert features == [FeatureLevelRecord(name="metadata.version", feature_level=metadata_version.latest().level),
                        *(LATEST_RELEASE_FEATURES if roles == "controller" else LATEST_RELEASE_FEATURES[:1])]
    if quorum == "static":
        assert kinds == ["SnapshotHeaderRecord"] + ["FeatureLevelRecord"] * len(features) + ["SnapshotFooterRecord"]
    else:
        assert records[1] == KRaftVersionRecord(version=0, k_raft_version=1)  # type: ignore[arg-type]
        voters = [r for r in records if isinstance(r, VotersRecord)]
        assert [[v.voter_id for v in r.voters] for r in voters] == ([] if expected_voters is None else [expected_voters])


# --- format: refusals (nothing is written) ------------------------------------------------------


def test_cluster_id_is_required(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "format", "-c", str(config), "-s"]) == 1  # Kafka's StorageTool exits 1 on usage errors
    assert "--cluster-id" in capsys.readouterr().err
    rc, _, err = storage(capsys, "format", "-c", str(config), "-t", " ", "-s")
    assert rc == 1 and "You must specify the cluster id." in err
    assert on_disk(tmp_path) == []


@pytest.mark.parametrize(
    "flags",
    [
        ["--standalone", "--no-initial-controllers"],
        ["--standalone", "--initial-controllers", INITIAL],
        ["-N", "-I", INITIAL],
    ],
)
def test_quorum_flags_are_mutually_exclusive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    config = write_config(tmp_path)
    assert main(["storage", "format", "-c", str(config), "-t", CLUSTER_ID, *flags]) == 1
    assert "not allowed with argument" in capsys.readouterr().err
    assert on_disk(tmp_path) == []


@pytest.mark.parametrize("flags", [["--standalone"], ["--initial-controllers", INITIAL], ["--no-initial-controllers"]])
def test_dynamic_flags_are_refused_next_to_static_voters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str]
) -> None:
    config = write_config(tmp_path, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, _, err = fmt(capsys, config, *flags)
    assert rc == 1
    assert f"You cannot specify controller.quorum.voters and format the node with {flags[0]}" in err
    assert on_disk(tmp_path) == []


def test_a_controller_without_voters_needs_a_quorum_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    rc, _, err = fmt(capsys, config)
    assert rc == 1
    assert (
        "Because controller.quorum.voters is not set on this controller, you must specify one of the following: "
        "--standalone, --initial-controllers, or --no-initial-controllers." in err
    )
    assert on_disk(tmp_path) == []


def test_standalone_on_a_broker_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, roles="broker", node_id=4)
    rc, _, err = fmt(capsys, config, "-s")
    assert rc == 1 and "You can only use --standalone on a controller." in err
    assert on_disk(tmp_path) == []


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("", "No voters given."),
        (f"1localhost:19093:{DIR_1}", "No @ found"),
        (f"x@localhost:19093:{DIR_1}", "Failed to parse node id"),
        (f"1@localhost:x:{DIR_1}", "Failed to parse port"),
        ("1@localhost:19093:not-a-uuid", "Failed to parse directory ID"),
        ("1@localhost:19093", "No colon following port"),
        (f"1@[::1:19093:{DIR_1}", "no right bracket"),
        (f"1@localhost:19093:{DIR_1},1@localhost:19094:{DIR_2}", "Node id 1 was specified more than once."),
    ],
)
def test_malformed_initial_controllers_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    config = write_config(tmp_path)
    rc, _, err = fmt(capsys, config, "-I", value)
    assert rc == 1 and reason in err
    assert on_disk(tmp_path) == []


def test_an_invalid_config_is_refused_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, **{"node.id": "abc"})
    rc, _, err = fmt(capsys, config, "-s")
    assert rc == 1 and "node.id" in err
    assert on_disk(tmp_path) == []


def test_formatted_directories_are_refused_unless_ignored(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=1)
    assert fmt(capsys, config, "-I", INITIAL)[0] == 0
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    rc, _, err = fmt(capsys, config, "-I", INITIAL)
    assert rc == 1
    assert f"Log directory {tmp_path}/data is already formatted. Use --ignore-formatted" in err

    rc, out, _ = fmt(capsys, config, "-I", INITIAL, "--ignore-formatted")
    assert rc == 0
    assert out.strip() == "All of the log directories are already formatted."
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_ignore_formatted_formats_only_the_new_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=1)
    assert fmt(capsys, config, "-I", INITIAL)[0] == 0
    old_ids = {read_meta_properties(tmp_path / d).directory_id for d in ("meta", "data")}
    config = write_config(
        tmp_path, node_id=1, **{"log.dirs": f"{tmp_path}/meta,{tmp_path}/data,{tmp_path}/data2"}
    )
    rc, out, _ = fmt(capsys, config, "-I", INITIAL, "-g")
    assert rc == 0
    assert out.strip() == f"Formatting data directory {tmp_path}/data2 with metadata.version {metadata_version.latest()}."
    assert read_meta_properties(tmp_path / "data2").directory_id not in old_ids


def test_another_clusters_disk_is_refused_even_with_ignore_formatted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path, node_id=1)
    assert fmt(capsys, config, "-I", INITIAL)[0] == 0
    rc, _, err = storage(capsys, "format", "-c", str(config), "-t", "AAAAAAAAAAAAAAAAAAAAAA", "-I", INITIAL, "-g")
    assert rc == 1 and "cluster.id" in err


def test_an_unreadable_data_directory_is_skipped_and_the_others_are_formatted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(
        tmp_path, **{"controller.quorum.voters": "1@localhost:19093", "log.dirs": f"{tmp_path}/meta,{tmp_path}/bad"}
    )
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.properties").write_text("version=1\ncluster.id=x\n")  # no node.id
    rc, out, err = fmt(capsys, config)
    assert rc == 0, err
    assert out.splitlines()[0] == f"I/O error trying to read log directory {tmp_path}/bad. Ignoring..."
    assert f"Formatting metadata directory {tmp_path}/meta" in out
    assert read_meta_properties(tmp_path / "meta").cluster_id == CLUSTER_ID
    assert (tmp_path / "bad" / "meta.properties").read_text() == "version=1\ncluster.id=x\n"


def test_no_readable_directory_to_format_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(
        tmp_path,
        roles="broker",
        node_id=4,
        **{"log.dirs": f"{tmp_path}/bad", "metadata.log.dir": f"{tmp_path}/bad"},
    )
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "meta.properties").write_text("version=1\ncluster.id=x\n")
    rc, _, err = fmt(capsys, config)
    assert rc == 1
    assert "bad" in err
    assert (tmp_path / "bad" / "meta.properties").read_text() == "version=1\ncluster.id=x\n"


# --- info ---------------------------------------------------------------------------------------


def test_info_on_formatted_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=2)
    assert fmt(capsys, config, "-I", INITIAL)[0] == 0
    rc, out, _ = storage(capsys, "info", "-c", str(config))
    data_id = to_kafka_str(read_meta_properties(tmp_path / "data").directory_id)  # type: ignore[arg-type]
    assert rc == 0
    assert out.splitlines() == [
        "Found log directories:",
        f"  {tmp_path}/data",
        f"  {tmp_path}/meta",
        "",
        f"Found metadata: {{cluster.id={CLUSTER_ID}, directory.id={data_id}, node.id=2, version=1}}",
        "",
        "Log directory states:",
        f"  {tmp_path}/data: formatted {{cluster.id={CLUSTER_ID}, directory.id={data_id}, node.id=2, version=1}}",
        f"  {tmp_path}/meta: formatted {{cluster.id={CLUSTER_ID}, directory.id={DIR_2}, node.id=2, version=1}}",
    ]


def test_info_reports_missing_empty_and_broken_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, **{"log.dirs": f"{tmp_path}/a,{tmp_path}/b,{tmp_path}/c", "metadata.log.dir": None})
    (tmp_path / "b").mkdir()
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "meta.properties").write_text("version=1\ncluster.id=x\n")
    rc, out, _ = storage(capsys, "info", "-c", str(config))
    assert rc == 1
    assert "Found problems:" in out
    assert f"  {tmp_path}/a does not exist" in out
    assert f"  {tmp_path}/b is not formatted." in out
    assert f"  Error loading {tmp_path}/c/meta.properties:" in out
    assert f"  {tmp_path}/a: missing (does not exist)" in out
    assert f"  {tmp_path}/b: empty (not formatted)" in out
    assert f"  {tmp_path}/c: error (" in out


def test_info_reports_mismatched_directories(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=1, **{"controller.quorum.voters": "1@localhost:19093"})
    assert fmt(capsys, config)[0] == 0
    meta = tmp_path / "meta" / "meta.properties"
    meta.write_text(meta.read_text().replace(f"cluster.id={CLUSTER_ID}", "cluster.id=other"))
    rc, out, _ = storage(capsys, "info", "-c", str(config))
    assert rc == 1
    assert "Mismatched cluster IDs between storage directories." in out


def test_info_reports_a_node_id_that_differs_from_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path, node_id=1, **{"controller.quorum.voters": "1@localhost:19093"})
    assert fmt(capsys, config)[0] == 0
    config = write_config(tmp_path, node_id=2, **{"controller.quorum.voters": "2@localhost:19094"})
    rc, out, _ = storage(capsys, "info", "-c", str(config))
    assert rc == 1
    assert "The directories belong to node.id 1, but the configuration says node.id 2." in out


def test_info_with_a_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = storage(capsys, "info", "-c", str(tmp_path / "nope.properties"))
    assert rc == 1 and "Cannot read configuration file" in err
    assert err.count(str(tmp_path / "nope.properties")) == 1


# --- feature levels (issue 16): what kafka-storage finalizes for a release ------------------------------


_TV2_GV1 = {"group.version": 1, "transaction.version": 2}


@pytest.mark.parametrize(("roles", "release", "expected"), [
    # Kafka finalizes group.version=1 from 4.0-IV0, transaction.version=2 from 4.0-IV2 and
    # eligible.leader.replicas.version=1 from 4.1-IV0: a controller formats exactly that.
    ("controller", "3.8-IV0", {}),
    ("controller", "3.9-IV0", {}),
    ("controller", "4.0-IV0", {"group.version": 1}),
    ("controller", "4.0-IV2", _TV2_GV1),
    ("controller", "4.1-IV1", {**_TV2_GV1, "eligible.leader.replicas.version": 1}),
    # A node that also runs the engine's broker stops at what that broker supports (ELR 1, level 0
    # of group and transaction versions), or its own broker would be refused at registration.
    ("broker,controller", "4.1-IV1", {"eligible.leader.replicas.version": 1}),
])
def test_release_version_finalizes_kafkas_default_feature_levels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], roles: str, release: str, expected: dict[str, int]
) -> None:
    config = write_config(tmp_path, roles=roles, **{"controller.quorum.voters": "1@localhost:19093"})
    rc, _, err = fmt(capsys, config, "--release-version", release)
    assert rc == 0, err
    features = [r for r in snapshot_records(tmp_path / "meta") if isinstance(r, FeatureLevelRecord)]
    level = metadata_version.from_version_string(release).level
    assert features == [FeatureLevelRecord(name="metadata.version", feature_level=level)] + [
        FeatureLevelRecord(name=name, feature_level=value) for name, value in sorted(expected.items())
    ]


def test_feature_flags_set_levels_the_engine_supports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(tmp_path)
    rc, _, err = fmt(capsys, config, "--standalone", "--release-version", "4.1-IV1",
                     "--feature", "group.version=0", "-f", "kraft.version=1", "-f", "transaction.version=1")
    assert rc == 0, err
    records = snapshot_records(tmp_path / "meta")
    assert [(f.name, f.feature_level) for f in records if isinstance(f, FeatureLevelRecord)] == [
        ("metadata.version", 27), ("eligible.leader.replicas.version", 1), ("transaction.version", 1)]
    assert KRaftVersionRecord(version=0, k_raft_version=1) in records  # type: ignore[arg-type]


@pytest.mark.parametrize(("flags", "message"), [
    (("--feature", "nope=1"), "Unsupported feature: nope. Supported features are: eligible.leader.replicas.version, "
                              "group.version, kraft.version, share.version, streams.version, transaction.version"),
    (("--feature", "group.version=7"), "No feature:group.version with feature level 7"),
    (("--release-version", "4.0-IV0", "--feature", "eligible.leader.replicas.version=1"),
     "eligible.leader.replicas.version could not be set to 1 because it depends on metadata.version level 23"),
    (("--feature", "group.version"), "Can't parse feature=level string group.version: equals sign not found."),
    (("--feature", "group.version=x"), "Can't parse feature=level string group.version=x: unable to parse x as a short."),
    (("--release-version", "3.8", "--feature", "kraft.version=1"),
     "kraft.version could not be set to 1 because it depends on metadata.version level 21 (3.9-IV0)"),
    (("--release-version", "3.9", "--feature", "metadata.version=21"),
     "Use --release-version instead of --feature metadata.version=X to avoid ambiguity."),
    (("--feature", "kraft.version=0"),
     "Cannot set kraft.version to 0 if one of the flags --standalone, --initial-controllers, or "
     "--no-initial-controllers is used. For dynamic controllers support, try removing the --feature flag for "
     "kraft.version."),
])
def test_bad_feature_flags_are_refused_with_kafkas_message_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    config = write_config(tmp_path)
    rc, out, err = fmt(capsys, config, "--standalone", *flags)
    assert rc == 1 and out == ""
    assert message in err
    assert on_disk(tmp_path) == []


def test_a_combined_node_lowers_only_the_defaults_its_broker_lacks(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # Kafka's defaults for 4.1-IV1, less what the engine's broker cannot support (the KIP-848 group
    # coordinator, KIP-890 transactions): ELR stays at Kafka's 1, since the broker now keeps
    # KIP-966's high-watermark rule and serves DescribeTopicPartitions.
    config = write_config(tmp_path, roles="broker,controller", node_id=1)
    rc, _, err = fmt(capsys, config, "-s", "--release-version", "4.1-IV1")
    assert rc == 0, err
    assert [(f.name, f.feature_level) for f in snapshot_records(tmp_path / "meta")
            if isinstance(f, FeatureLevelRecord)] == [("metadata.version", 27), ("eligible.leader.replicas.version", 1)]


@pytest.mark.parametrize("feature", ["transaction.version=2", "group.version=1"])
def test_a_level_the_engines_broker_lacks_is_refused_on_a_node_that_runs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], feature: str
) -> None:
    # Refused like a level Kafka's software does not have; the same level on a controller is fine.
    name, _, level = feature.partition("=")
    (tmp_path / "combined").mkdir()
    (tmp_path / "controller").mkdir()
    config = write_config(tmp_path / "combined", roles="broker,controller")
    rc, out, err = fmt(capsys, config, "--standalone", "--feature", feature)
    assert rc == 1 and out == ""
    assert f"No feature:{name} with feature level {level}" in err
    assert on_disk(tmp_path / "combined") == []
    rc, _, err = fmt(capsys, write_config(tmp_path / "controller"), "--standalone", "--feature", feature)
    assert rc == 0, err


def test_feature_metadata_version_alone_picks_the_release(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = fmt(capsys, write_config(tmp_path), "--standalone", "--feature", "metadata.version=21")
    assert rc == 0, err
    assert "with metadata.version 3.9-IV0." in out


def test_version_mapping_answers_as_kafka_storage_does(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = storage(capsys, "version-mapping", "--release-version", "4.1-IV1")
    assert rc == 0
    assert out == ("metadata.version=27 (4.1-IV1)\nkraft.version=1\ntransaction.version=2\ngroup.version=1\n"
                   "eligible.leader.replicas.version=1\nshare.version=0\nstreams.version=0\n")
    rc, out, _ = storage(capsys, "version-mapping", "--release-version", "3.3")
    assert out.splitlines()[:2] == ["metadata.version=7 (3.3)", "kraft.version=0"]
    rc, out, err = storage(capsys, "version-mapping", "--release-version", "9.9")
    assert rc == 1 and "Unknown release version '9.9'. Supported versions are: 3.3-IV3 to " in err


def test_feature_dependencies_answers_as_kafka_storage_does(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = storage(capsys, "feature-dependencies", "--feature", "eligible.leader.replicas.version=1",
                         "--feature", "group.version=1", "--feature", "metadata.version=27")
    assert rc == 0
    assert out == ("eligible.leader.replicas.version=1 requires:\n    metadata.version=23 (4.0-IV1)\n"
                   "group.version=1 has no dependencies.\nmetadata.version=27 (4.1-IV1) has no dependencies.\n")
    for feature, message in (("foo=1", "Unknown feature: foo"),
                             ("group.version=9", "Feature level 9 is not supported for feature group.version"),
                             ("kraft.version=x", "Invalid version format: x for feature kraft.version"),
                             ("metadata.version=99", "Unknown metadata.version 99")):
        rc, _, err = storage(capsys, "feature-dependencies", "--feature", feature)
        assert rc == 1 and message in err
