"""The `kraft` dispatcher: unknown tools are refused, refusals print without a traceback."""

from __future__ import annotations

import pytest

from kraft_engine.cli.main import build_parser, main


def test_unknown_tool_is_refused_with_usage(capsys: pytest.CaptureFixture[str]) -> None:
    # Kafka's tools exit 1 on a usage error; --help still exits 0.
    assert main(["no-such-tool"]) == 1
    assert "invalid choice" in capsys.readouterr().err
    assert main(["console-producer", "--bootstrap-server", "127.0.0.1:9092"]) == 1
    assert "--topic" in capsys.readouterr().err
    assert main(["console-producer", "--help"]) == 0


def test_every_registered_tool_has_a_handler() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "tool")
    for name, tool_parser in sub.choices.items():  # type: ignore[union-attr]
        assert tool_parser.get_default("func") is not None or tool_parser._subparsers is not None, name
