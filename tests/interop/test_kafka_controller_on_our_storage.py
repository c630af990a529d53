"""Apache Kafka's own controller starts on storage that `kraft storage format --standalone` wrote.

The strongest check of the formatter: Kafka reads our meta.properties and our bootstrap
checkpoint, takes the voter set from it (this node, at its directory id), elects itself, and
appends its controller registration to the metadata log, which `kraft dump-log` then reads exactly
as Kafka's DumpLogSegments does. Needs the cached Kafka jars (scripts/fetch-kafka-jars) and a JDK.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.loopback_ports import free_loopback_ports
from kraft_engine.records import (
    RegisterControllerRecord,
    decode_metadata_record,
    decode_records,
    iter_batches,
)
from kraft_engine.storage.formatter import CLUSTER_METADATA_DIR_NAME
from kraft_engine.storage.meta_properties import read_meta_properties

from .kafka_jars import CLASSPATH, kafka_dump, needs_jars

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

# Generous: a JVM start on a loaded 2-core machine. This bounds the wait; it is not asserted on.
_STARTUP_DEADLINE_S = 120


def _registered_controllers(log: Path) -> list[RegisterControllerRecord]:
    if not log.exists():
        return []
    found = []
    for header, raw in iter_batches(log.read_bytes()):
        if header.is_control:
            continue
        for record in decode_records(raw):
            decoded, _ = decode_metadata_record(record.value or b"")
            if isinstance(decoded, RegisterControllerRecord):
                found.append(decoded)
    return found


@needs_jars
def test_kafka_controller_elects_itself_from_our_bootstrap_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (port,) = free_loopback_ports(1)
    config = tmp_path / "server.properties"
    config.write_text(
        "process.roles=controller\nnode.id=1\n"
        f"listeners=CONTROLLER://127.0.0.1:{port}\ncontroller.listener.names=CONTROLLER\n"
        f"controller.quorum.bootstrap.servers=127.0.0.1:{port}\nlog.dirs={tmp_path}/meta\n"
    )
    # 4.0-IV3: a level every Kafka 4.x controller implements.
    args = ["storage", "format", "-c", str(config), "-t", "MkU3OEVBNTcwNTJENDM2Qk", "--standalone", "-r", "4.0"]
    assert main(args) == 0
    capsys.readouterr()
    directory_id = read_meta_properties(tmp_path / "meta").directory_id
    partition = tmp_path / "meta" / CLUSTER_METADATA_DIR_NAME
    log = partition / "00000000000000000000.log"

    assert CLASSPATH is not None
    with (tmp_path / "kafka.log").open("w") as kafka_log:
        process = subprocess.Popen(
            ["java", "-Xmx256m", "-cp", CLASSPATH, "kafka.Kafka", str(config)],
            stdout=kafka_log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + _STARTUP_DEADLINE_S
            while not _registered_controllers(log) and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
            registered = _registered_controllers(log)
        finally:
            process.terminate()
            process.wait(timeout=60)

    output = (tmp_path / "kafka.log").read_text()
    assert registered, f"Kafka did not register its controller; its output:\n{output[-4000:]}"
    assert [r.controller_id for r in registered] == [1]
    quorum_state = json.loads((partition / "quorum-state").read_text())
    assert quorum_state["leaderId"] == 1
    # Kafka kept our identity: the directory id the voter set names is still this directory's.
    assert read_meta_properties(tmp_path / "meta").directory_id == directory_id
    kafka = kafka_dump(log)
    assert f'"voterDirectoryId":"{to_kafka_str(directory_id)}"' in kafka  # type: ignore[arg-type]
    assert main(["dump-log", "--cluster-metadata-decoder", "--files", str(log)]) == 0
    assert capsys.readouterr().out == kafka
