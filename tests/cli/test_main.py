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


def test_a_named_tool_is_parsed_with_its_own_module_only() -> None:
    # `kraft <tool> ...` builds the parser of that tool alone (its imports, not every tool's); the
    # full parser lists every tool, and a name that is no tool gets the full parser's refusal.
    alone = next(a for a in build_parser("get-offsets")._actions if a.dest == "tool")
    assert list(alone.choices) == ["get-offsets"]  # type: ignore[arg-type]
    every = next(a for a in build_parser()._actions if a.dest == "tool")
    assert {"get-offsets", "consumer-groups", "server", "topics"} <= set(every.choices)  # type: ignore[arg-type]
    unknown = next(a for a in build_parser("no-such-tool")._actions if a.dest == "tool")
    assert list(unknown.choices) == list(every.choices)  # type: ignore[arg-type]
