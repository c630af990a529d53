"""A consumer group that does not exist is described as Apache Kafka 4.1 describes it.

Kafka 4.1's broker answers DescribeGroups for an unknown group with the group Dead and no error up
to v5, and from v6 (KIP-1043) with GROUP_ID_NOT_FOUND and "Group G not found."; Kafka's Admin then
fails the group with GroupIdNotFoundException, and `kafka-consumer-groups --describe` prints
"Error: Executing consumer group command failed due to ...GroupIdNotFoundException: Group G not
found." on standard output and exits 0, for the offsets, members and state views alike. The same
requests and the same tool runs go to (1) our controller and broker and (2) one Kafka 4.1
combined node; the answers, Kafka's tool on both, and our tool must all agree. Needs the cached
Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from pathlib import Path

import pytest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest as DescribeGroupsV5
from kio.schema.describe_groups.v6.request import DescribeGroupsRequest as DescribeGroupsV6
from kio.schema.errors import ErrorCode
from kio.schema.types import GroupId

from kraft_engine.cli.main import main
from kraft_engine.protocol import KafkaConnection

from .kafka_jars import kafka_tool, needs_jars
from .single_nodes import kafka_node, kafka_started
from .test_kafka_configs_tool import our_controller_and_broker
from .test_mixed_brokers import _DEADLINE_S, _running, _until

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]

_MISSING = "no-such-group"
_VIEWS: tuple[tuple[str, ...], ...] = ((), ("--members",), ("--state",))
_RETRIABLE = (ErrorCode.coordinator_load_in_progress, ErrorCode.coordinator_not_available, ErrorCode.not_coordinator)


def _described(port: int) -> dict[int, tuple[int, str, str | None, str, int]]:
    """Per DescribeGroups version: (error, state, error message, protocol type, members) of the
    missing group; a coordinator still loading is asked again until the deadline."""
    async def ask(version: int) -> tuple[int, str, str | None, str, int] | None:
        request = (DescribeGroupsV6 if version == 6 else DescribeGroupsV5)(
            groups=(GroupId(_MISSING),), include_authorized_operations=False)
        async with KafkaConnection("127.0.0.1", port) as connection:
            await connection.connect()
            [group] = (await connection.send(request)).groups
        if ErrorCode(group.error_code) in _RETRIABLE:
            return None
        return (int(group.error_code), str(group.group_state), getattr(group, "error_message", None),
                str(group.protocol_type), len(group.members))

    answers: dict[int, tuple[int, str, str | None, str, int]] = {}
    for version in (5, 6):
        def answered(version: int = version) -> bool:
            answer = asyncio.run(ask(version))
            if answer is not None:
                answers[version] = answer
            return answer is not None
        _until(answered, f"DescribeGroups v{version} without a coordinator error")
    return answers


def _kafkas_tool(bootstrap: str) -> list[tuple[int, str]]:
    runs = []
    for view in _VIEWS:
        result = kafka_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
                            bootstrap, "--describe", "--group", _MISSING, *view, timeout_s=_DEADLINE_S)
        runs.append((result.returncode, result.stdout))
    return runs


def _our_tool(bootstrap: str) -> list[tuple[int, str]]:
    runs = []
    for view in _VIEWS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            code = main(["consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", _MISSING, *view])
        runs.append((code, out.getvalue()))
    return runs


@needs_jars
@pytest.mark.timeout(900)
def test_a_missing_group_is_answered_and_reported_as_kafka_does(tmp_path: Path) -> None:
    static = {"offsets.topic.replication.factor": "1", "offsets.topic.num.partitions": "3"}
    with our_controller_and_broker(tmp_path, static) as (port, _):
        bootstrap = f"127.0.0.1:{port}"
        kafkas_tool_on_ours = _kafkas_tool(bootstrap)  # its FindCoordinator creates __consumer_offsets
        our_answers = _described(port)
        our_tool = _our_tool(bootstrap)

    kafka = kafka_node(tmp_path, static)
    with _running(kafka.commands):
        _until(lambda: kafka_started(tmp_path), "the Kafka node to start")
        kafkas_tool_on_kafka = _kafkas_tool(kafka.bootstrap)
        kafka_answers = _described(kafka.port)

    assert our_answers == kafka_answers
    assert kafkas_tool_on_ours == kafkas_tool_on_kafka
    assert our_tool == kafkas_tool_on_kafka
    # Not vacuous: what Kafka's broker and tool say, seen here.
    assert kafka_answers[6][:3] == (int(ErrorCode.group_id_not_found), "Dead", f"Group {_MISSING} not found.")
    assert kafka_answers[5][:2] == (int(ErrorCode.none), "Dead")
    assert kafkas_tool_on_kafka[0] == (0, "\nError: Executing consumer group command failed due to "
                                          "org.apache.kafka.common.errors.GroupIdNotFoundException: "
                                          f"Group {_MISSING} not found.\n")
