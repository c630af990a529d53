"""`kraft quickstart`: three formatted controllers of one dynamic quorum on the first run; later runs
find the storage formatted, change nothing, and repair only what is missing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.server.config import load_config
from kraft_engine.storage.formatter import parse_dynamic_voters
from kraft_engine.storage.java_properties import parse_properties
from kraft_engine.storage.meta_properties import read_meta_properties


def quickstart(capsys: pytest.CaptureFixture[str], state: Path) -> tuple[int, str, str]:
    rc = main(["quickstart", "--state-dir", str(state), "--no-start"])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def snapshot_of(state: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(state.rglob("*")) if p.is_file()}


def test_first_run_formats_three_controllers_of_one_quorum(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "qs"
    rc, out, err = quickstart(capsys, state)
    assert rc == 0, err

    plan = parse_properties((state / "quickstart.properties").read_text())
    voters = parse_dynamic_voters(plan["initial.controllers"])
    assert [v.node_id for v in voters] == [1, 2, 3]
    assert len({v.port for v in voters}) == 3
    for voter in voters:
        config = load_config(state / f"controller-{voter.node_id}" / "server.properties")
        assert config.node_id == voter.node_id and config.is_controller and not config.is_broker
        assert [(e.host, e.port) for e in config.listeners] == [("127.0.0.1", voter.port)]
        assert config.controller_quorum_voters == ()
        assert len(config.controller_quorum_bootstrap_servers) == 3
        meta = read_meta_properties(Path(config.metadata_log_dir))
        assert (meta.cluster_id, meta.node_id, meta.directory_id) == (plan["cluster.id"], voter.node_id, voter.directory_id)

    assert out.count("Formatting dynamic metadata voter directory") == 3
    assert out.count("Found metadata: {cluster.id=" + plan["cluster.id"]) == 3
    assert "Found problem" not in out
    assert out.count('"voterId":') == 3
    assert '"type":"FEATURE_LEVEL_RECORD"' in out
    assert 'SnapshotFooter {"version":0}' in out


def test_second_run_detects_the_formatted_storage_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "qs"
    assert quickstart(capsys, state)[0] == 0
    before = snapshot_of(state)

    rc, out, _ = quickstart(capsys, state)

    assert rc == 0
    assert out.count("storage is already formatted") == 3
    assert "Formatting" not in out
    assert snapshot_of(state) == before


def test_a_lost_node_directory_is_formatted_again_with_its_recorded_identity(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "qs"
    assert quickstart(capsys, state)[0] == 0
    plan = parse_properties((state / "quickstart.properties").read_text())
    two = next(v for v in parse_dynamic_voters(plan["initial.controllers"]) if v.node_id == 2)
    shutil.rmtree(state / "controller-2")

    rc, out, _ = quickstart(capsys, state)

    assert rc == 0
    assert out.count("storage is already formatted") == 2
    assert out.count("Formatting dynamic metadata voter directory") == 1
    meta = read_meta_properties(state / "controller-2" / "metadata")
    assert meta.cluster_id == plan["cluster.id"]
    assert to_kafka_str(meta.directory_id) == to_kafka_str(two.directory_id)  # type: ignore[arg-type]


def test_a_damaged_plan_file_is_refused_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "qs"
    state.mkdir()
    (state / "quickstart.properties").write_text("cluster.id=abc\n")
    rc, _, err = quickstart(capsys, state)
    assert rc == 1
    assert "lacks initial.controllers" in err
    (state / "quickstart.properties").write_text("cluster.id=abc\ninitial.controllers=1@127.0.0.1:1\n")
    rc, _, err = quickstart(capsys, state)
    assert rc == 1
    assert "No colon following port" in err
    assert sorted(p.name for p in state.iterdir()) == ["quickstart.properties"]
