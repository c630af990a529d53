"""`kraft delete-records --offset-json-file` reads Kafka's offset JSON and refuses anything else
with a message naming the problem, before anything is sent."""

from __future__ import annotations

from pathlib import Path

import pytest

from kraft_engine.cli.delete_records import parse_offset_json
from kraft_engine.cli.main import main


def test_kafkas_offset_json_is_read_in_file_order() -> None:
    text = '{"partitions": [{"topic": "b", "partition": 1, "offset": 7}, {"topic": "a", "partition": 0, "offset": -1}],' \
           ' "version": 1}'
    assert parse_offset_json(text) == [(("b", 1), 7), (("a", 0), -1)]


@pytest.mark.parametrize(("text", "reason"), [
    ("{", "is not JSON"),
    ("[]", "must hold an object"),
    ('{"version": 1}', 'no "partitions" array'),
    ('{"partitions": [], "version": 1}', 'no "partitions" array'),
    ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}], "version": 2}', "Not supported version field value 2"),
    ('{"partitions": [{"partition": 0, "offset": 1}]}', 'needs a "topic" string'),
    ('{"partitions": [{"topic": "a", "partition": "0", "offset": 1}]}', 'needs an integer "partition"'),
    ('{"partitions": [{"topic": "a", "partition": 0}]}', 'needs an integer "offset"'),
    ('{"partitions": [{"topic": "a", "partition": -2, "offset": 0}]}', "negative partition -2"),
    ('{"partitions": [{"topic": "a", "partition": 0, "offset": 1}, {"topic": "a", "partition": 0, "offset": 2}]}',
     "Offset json file contains duplicate topic partitions: a-0"),
])
def test_anything_else_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=None) as refused:
        parse_offset_json(text)
    assert reason in str(refused.value)


def test_the_tool_refuses_a_bad_file_before_connecting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "offsets.json"
    bad.write_text('{"partitions": [{"topic": "a", "partition": 0}]}')
    # Port 9 on loopback: nothing is listening; a refusal must come before any connection attempt.
    assert main(["delete-records", "--bootstrap-server", "127.0.0.1:9", "--offset-json-file", str(bad)]) == 1
    captured = capsys.readouterr()
    assert 'needs an integer "offset"' in captured.err
    assert "Executing records delete operation" not in captured.out
    assert main(["delete-records", "--bootstrap-server", "127.0.0.1:9", "--offset-json-file", str(tmp_path / "none")]) == 1
    assert "cannot read --offset-json-file" in capsys.readouterr().err
