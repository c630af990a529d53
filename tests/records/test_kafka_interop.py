"""Apache Kafka's own classes read what kraft_engine.records writes, and agree byte for byte.

Runs `KafkaRecordsEcho.java` (next to this file) against the jars `scripts/fetch-kafka-jars` caches
under `.kafka-jars/<version>/` (or `$KAFKA_JARS_DIR`): Kafka's `MetadataRecordSerde` decodes and
re-encodes every metadata record type at every version, `MetadataJsonConverters` renders the JSON
dump-log prints, and Kafka's `MemoryRecords` builders rebuild our data and control batches. Skips when
the jars or a JDK are absent.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from kio.schema.k_raft_version_record.v0.data import KRaftVersionRecord
from kio.schema.leader_change_message.v0.data import LeaderChangeMessage
from kio.schema.leader_change_message.v0.data import Voter as LeaderChangeVoter
from kio.schema.snapshot_footer_record.v0.data import SnapshotFooterRecord
from kio.schema.snapshot_header_record.v0.data import SnapshotHeaderRecord
from kio.schema.types import BrokerId
from kio.static.primitive import i16, i32, i64
from record_strategies import entity_strategy, sample_voters_record

from kraft_engine.records import (
    METADATA_RECORD_TYPES,
    ControlRecord,
    build_batch,
    build_control_batch,
    decode_metadata_record,
    encode_metadata_record,
    record_to_json,
)

pytestmark = pytest.mark.kafka_jars

_REPO = Path(__file__).resolve().parents[2]
_ECHO = Path(__file__).with_name("KafkaRecordsEcho.java")


def _kafka_classpath() -> str | None:
    root = Path(os.environ.get("KAFKA_JARS_DIR", _REPO / ".kafka-jars"))
    if not root.is_dir() or shutil.which("java") is None:
        return None
    for version_dir in sorted(root.iterdir(), reverse=True):
        if any(version_dir.glob("kafka-metadata-*.jar")):
            return f"{version_dir}/*"
    return None


CLASSPATH = _kafka_classpath()
if CLASSPATH is None:
    pytest.skip("Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH", allow_module_level=True)


def _echo(mode: str, path: Path | None = None) -> list[str]:
    assert CLASSPATH is not None
    command = ["java", "-cp", CLASSPATH, str(_ECHO), mode] + ([str(path)] if path else [])
    result = subprocess.run(command, capture_output=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    # Split on newlines only: str.splitlines() would also split inside strings holding U+2028 etc.
    return result.stdout.decode("utf-8").removesuffix("\n").split("\n")


def test_record_types_and_versions_match_kafka() -> None:
    kafka = {}
    for line in _echo("versions"):
        api_key, lowest, highest, name = line.split()
        kafka[int(api_key)] = (int(lowest), int(highest), name)
    ours = {k: (0, t.highest_version, t.type_name) for k, t in METADATA_RECORD_TYPES.items()}
    assert {k: kafka[k] for k in ours} == ours
    # Kafka 4.1 also has ClearElrRecord (28), which the engine's schemas do not define.
    assert set(kafka) - set(ours) <= {28}


_ALL_VERSIONS = st.tuples(
    *(
        entity_strategy(record_type.version_classes[version])
        for record_type in METADATA_RECORD_TYPES.values()
        for version in range(record_type.highest_version + 1)
    )
)


# Each example starts a JVM, so draw few, large examples and skip shrinking (it would rerun Java).
@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(records=_ALL_VERSIONS)
def test_kafka_reads_and_rewrites_every_metadata_record_identically(records: tuple[Any, ...], tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("records") / "records.hex"
    encoded = [encode_metadata_record(record) for record in records]
    path.write_text("".join(data.hex() + "\n" for data in encoded))
    lines = _echo("metadata", path)
    assert len(lines) == len(records)
    for record, data, line in zip(records, encoded, lines, strict=True):
        rewritten, type_name, kafka_json = line.split("\t")
        assert bytes.fromhex(rewritten) == data, type(record).__name__
        ours = record_to_json(record)
        assert type_name == ours["type"]
        assert json.loads(kafka_json) == ours["data"], type(record).__name__
        assert decode_metadata_record(data)[1] == ours["version"]


def test_kafka_builds_the_same_batches(tmp_path: Path) -> None:
    control_records: list[ControlRecord] = [
        LeaderChangeMessage(
            version=i16(0),
            leader_id=BrokerId(1),
            voters=(LeaderChangeVoter(voter_id=i32(1)), LeaderChangeVoter(voter_id=i32(2))),
            granting_voters=(LeaderChangeVoter(voter_id=i32(1)),),
        ),
        SnapshotHeaderRecord(version=i16(0), last_contained_log_timestamp=i64(1_700_000_000_000)),
        SnapshotFooterRecord(version=i16(0)),
        KRaftVersionRecord(version=i16(0), k_raft_version=i16(1)),
        sample_voters_record(),
    ]
    batches = [
        build_batch(
            base_offset=0,
            partition_leader_epoch=3,
            values=[b"a", b"", b"x" * 300],
            keys=[None, b"k", None],
            timestamp_ms=1_700_000_000_123,
        )
    ]
    offset = 3
    for index, record in enumerate(control_records):
        batches.append(
            build_control_batch(
                base_offset=offset, partition_leader_epoch=4, timestamp_ms=1_700_000_001_000 + index, records=[record]
            )
        )
        offset += 1
    path = tmp_path / "batches.log"
    path.write_bytes(b"".join(batches))
    lines = _echo("batches", path)
    assert lines[0] == "0 2 3 false false 1700000000123 -1 3 SAME"
    assert lines[1:] == [
        f"{3 + i} {3 + i} 4 true false {1_700_000_001_000 + i} -1 1 SAME" for i in range(len(control_records))
    ]
