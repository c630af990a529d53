"""`kraft consumer-groups --validate-regex` answers as Kafka 4.1's `kafka-consumer-groups --validate-regex`.

Kafka's tool compiles the pattern with RE2J (`com.google.re2j.Pattern.compile`) and prints
"The regular expression `P` is valid." or "... is invalid: <RE2J's description>.". `Re2jOracle.java`
runs that very method (ConsumerGroupCommand.validateRegex) and RE2J's compile over Kafka's jars for
every pattern of `re2j_cases.py` and for thousands of seeded random patterns built from regex
syntax; our tool must print the same line for each, and our checker must name the same fragment
(RE2J's message). The tool's main class, run as a process, must agree too (output and exit
status, with no server). Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
from pathlib import Path

import pytest

from kraft_engine.cli.main import main
from kraft_engine.re2_syntax import re2j_syntax_error

from .kafka_jars import CLASSPATH, kafka_tool, needs_jars
from .re2j_cases import ERRORS, PYTHON_NOT_VALID, VALID, VALID_NOT_PYTHON

pytestmark = pytest.mark.kafka_jars

ORACLE = Path(__file__).with_name("Re2jOracle.java")
RANDOM_PATTERNS = 4000
_TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# Pieces of regex syntax, valid and not, that random patterns are built from.
_PIECES = ("a", "b", "é", "0", "9", ",", ":", "=", "!", "<", ">", "P", "-", "^", "$", ".", "(", ")", "(?:", "(?i)",
           "(?i-s:", "(?P<n>", "(?<m>", "(?", "|", "*", "+", "?", "{", "}", "{2}", "{1,3}", "{2,}", "{0}", "{1001}",
           "[", "]", "[^", "[:alpha:]", "[:foo:]", "\\", "\\d", "\\W", "\\pL", "\\p{Greek}", "\\p{Adlam}", "\\P",
           "\\x{41}", "\\x4", "\\1", "\\10", "\\Q", "\\E", "\\z", "\\Z", "\\b", "\\C", "\\n", "\\.")


def _random_patterns() -> list[str]:
    rng = random.Random(848)
    return ["".join(rng.choice(_PIECES) for _ in range(rng.randint(1, 7))) for _ in range(RANDOM_PATTERNS)]


def _kafka_answers(patterns: list[str]) -> list[dict[str, str | None]]:
    assert CLASSPATH is not None
    kafka = subprocess.run(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", CLASSPATH, str(ORACLE)],
        input="".join(json.dumps(p) + "\n" for p in patterns), capture_output=True, text=True, timeout=600,
        check=False)
    assert kafka.returncode == 0, kafka.stderr
    answers = [json.loads(line) for line in kafka.stdout.splitlines()]
    assert len(answers) == len(patterns), kafka.stderr
    return answers


def _our_line(pattern: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["consumer-groups", f"--validate-regex={pattern}"]) == 0
    return out.getvalue()


@needs_jars
@pytest.mark.timeout(900)
def test_every_pattern_is_judged_and_printed_as_kafkas_tool_does() -> None:
    table = [p for p, _, _ in ERRORS] + list(VALID + VALID_NOT_PYTHON + PYTHON_NOT_VALID)
    patterns = table + _random_patterns()
    answers = _kafka_answers(patterns)
    disagreements = []
    for pattern, kafka in zip(patterns, answers, strict=True):
        error = re2j_syntax_error(pattern)
        ours = {"printed": _our_line(pattern), "message": None if error is None else str(error)}
        if ours != kafka:
            disagreements.append((pattern, ours, kafka))
    assert disagreements == []
    # Not vacuous: the random patterns hit every error class and many valid patterns.
    randoms = answers[len(table):]
    seen = {d for _, d, _ in ERRORS
            if any((a["message"] or "").startswith(f"error parsing regexp: {d}") for a in randoms)}
    assert seen == {d for _, d, _ in ERRORS}
    valid = sum(a["message"] is None for a in randoms)
    assert 400 < valid < RANDOM_PATTERNS - 400


@needs_jars
@pytest.mark.timeout(300)
@pytest.mark.parametrize("pattern", ["orders-(eu|us)\\.v[0-9]+", "orders-(?<=eu)"])
def test_kafkas_tool_and_ours_print_the_same_without_a_server(pattern: str) -> None:
    kafka = kafka_tool(_TOOL, "--validate-regex", pattern)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["consumer-groups", "--validate-regex", pattern])
    assert (code, out.getvalue()) == (kafka.returncode, kafka.stdout)
    assert kafka.returncode == 0 and pattern in kafka.stdout
