"""The rack init container's program: the downward API's annotations file in, server.properties
with broker.rack out, as a real process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kraft_engine.storage.java_properties import parse_properties
from kraft_operator.runtime.rack_init import RackInitError, parse_annotations, rack_config

RACK_INIT = [sys.executable, "-m", "kraft_operator.runtime.rack_init"]
CONFIG = "process.roles=broker\nnode.id=3\nbroker.rack=stale\n"


def test_the_downward_api_annotations_file_is_read_as_go_quoted_values() -> None:
    text = 'kraftwerk.io/broker-rack="zone-a"\nkubernetes.io/config.seen="2026-11-25T19:00:00Z"\nnote="a \\"b\\"\\n"\n'
    assert parse_annotations(text) == {
        "kraftwerk.io/broker-rack": "zone-a",
        "kubernetes.io/config.seen": "2026-11-25T19:00:00Z",
        "note": 'a "b"\n',
    }
    with pytest.raises(RackInitError, match="not a quoted string"):
        parse_annotations("kraftwerk.io/broker-rack=zone-a\n")


def test_the_rack_replaces_any_broker_rack_and_an_empty_one_removes_it() -> None:
    assert parse_properties(rack_config(CONFIG, "zone-b"))["broker.rack"] == "zone-b"
    assert "broker.rack" not in parse_properties(rack_config(CONFIG, ""))


def _run(tmp_path: Path, annotations: str | None, *extra: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    config = tmp_path / "server.properties"
    config.write_text(CONFIG)
    pod_info = tmp_path / "annotations"
    if annotations is not None:
        pod_info.write_text(annotations)
    output = tmp_path / "out" / "server.properties"
    output.parent.mkdir()
    result = subprocess.run([*RACK_INIT, "--annotations", str(pod_info), "--config", str(config),
                             "--output", str(output), *extra], capture_output=True, text=True, timeout=60, check=False)
    return result, output


def test_the_program_writes_the_config_with_the_nodes_rack(tmp_path: Path) -> None:
    result, output = _run(tmp_path, 'kraftwerk.io/broker-rack="zone-c"\n')
    assert result.returncode == 0, result.stderr
    assert "broker.rack=zone-c" in result.stdout
    written = parse_properties(output.read_text())
    assert written == {"process.roles": "broker", "node.id": "3", "broker.rack": "zone-c"}


def test_without_the_annotation_it_gives_up_after_its_timeout_and_writes_nothing(tmp_path: Path) -> None:
    result, output = _run(tmp_path, 'other="x"\n', "--timeout-s", "0")
    assert result.returncode == 1
    assert "no kraftwerk.io/broker-rack annotation" in result.stderr
    assert not output.exists()


def test_a_damaged_annotations_file_is_refused_by_name(tmp_path: Path) -> None:
    result, output = _run(tmp_path, "kraftwerk.io/broker-rack=unquoted\n")
    assert result.returncode == 1 and "not a quoted string" in result.stderr
    assert not output.exists()
