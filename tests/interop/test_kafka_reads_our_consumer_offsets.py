"""Kafka's DumpLogSegments --offsets-decoder reads the `__consumer_offsets` records we write:
offset commits, group metadata (a static member) and tombstones, as Kafka's own decoder prints them."""

from __future__ import annotations

import json
from pathlib import Path

from kraft_engine.records.client_records import ProducedRecord, encode_client_batch
from kraft_engine.records.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

from .kafka_jars import kafka_tool, needs_jars

pytestmark = [needs_jars]


def test_dump_log_offsets_decoder_reads_our_records(tmp_path: Path) -> None:
    member = MemberMetadata(member_id="pod-1-abc", client_id="app", client_host="/127.0.0.1", session_timeout_ms=45000,
                            rebalance_timeout_ms=300000, subscription=b"\x00\x00", assignment=b"\x00\x01",
                            group_instance_id="pod-1")
    records = [
        (encode_offset_commit_key(OffsetCommitKey("g1", "orders", 3)),
         encode_offset_commit_value(OffsetCommitValue(offset=42, metadata="m", commit_timestamp_ms=1700000000000,
                                                      leader_epoch=5))),
        (encode_group_metadata_key(GroupMetadataKey("g1")),
         encode_group_metadata_value(GroupMetadataValue(protocol_type="consumer", generation=7, protocol="range",
                                                        leader="pod-1-abc", current_state_timestamp_ms=1700000000001,
                                                        members=(member,)))),
        (encode_offset_commit_key(OffsetCommitKey("g1", "orders", 4)), None),
    ]
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(encode_client_batch([ProducedRecord(value=v, key=k, timestamp_ms=1700000000000)
                                             for k, v in records]))
    result = kafka_tool("kafka.tools.DumpLogSegments", "--offsets-decoder", "--files", str(segment))
    assert result.returncode == 0, result.stderr
    decoded = [line for line in result.stdout.splitlines() if line.startswith("| offset:")]
    assert len(decoded) == 3

    def part(line: str, name: str, end: str) -> str:
        return line.split(f" {name}: ", 1)[1].split(end, 1)[0] if end else line.split(f" {name}: ", 1)[1]

    assert json.loads(part(decoded[0], "key", " payload:")) == {
        "type": "1", "data": {"group": "g1", "topic": "orders", "partition": 3}}
    assert json.loads(part(decoded[0], "payload", "")) == {
        "version": "3", "data": {"offset": 42, "leaderEpoch": 5, "metadata": "m", "commitTimestamp": 1700000000000}}
    assert json.loads(part(decoded[1], "key", " payload:")) == {"type": "2", "data": {"group": "g1"}}
    assert json.loads(part(decoded[1], "payload", "")) == {"version": "3", "data": {
        "protocolType": "consumer", "generation": 7, "protocol": "range", "leader": "pod-1-abc",
        "currentStateTimestamp": 1700000000001, "members": [{
            "memberId": "pod-1-abc", "groupInstanceId": "pod-1", "clientId": "app", "clientHost": "/127.0.0.1",
            "rebalanceTimeout": 300000, "sessionTimeout": 45000, "subscription": "AAA=", "assignment": "AAE="}]}}
    assert part(decoded[2], "payload", "") == "<DELETE>"
