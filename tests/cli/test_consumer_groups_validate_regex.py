"""`kraft consumer-groups --validate-regex`: Kafka 4.1's check of a consumer-group topic regex.

The checker (`kraft_engine.re2_syntax`) answers every pattern of `interop/re2j_cases.py` with
RE2J 1.8's description and fragment; that table is RE2J's own answer
(`interop/test_kafka_validate_regex.py` asks Kafka's classes). The tool prints Kafka's line for a
valid and an invalid pattern, needs no server, and exits 0 either way, as Kafka's does.
"""

from __future__ import annotations

import re
import warnings

import pytest
from interop.re2j_cases import ERRORS, PYTHON_NOT_VALID, VALID, VALID_NOT_PYTHON

from kraft_engine.cli.main import main
from kraft_engine.re2_syntax import Re2jSyntaxError, re2j_check, re2j_syntax_error


@pytest.mark.parametrize(("pattern", "description", "fragment"), ERRORS)
def test_each_error_class_is_refused_with_re2js_description_and_fragment(pattern: str, description: str,
                                                                        fragment: str | None) -> None:
    error = re2j_syntax_error(pattern)
    assert error is not None
    assert (error.description, error.fragment) == (description, fragment)
    assert str(error) == (f"error parsing regexp: {description}" if fragment is None
                          else f"error parsing regexp: {description}: `{fragment}`")
    with pytest.raises(Re2jSyntaxError):
        re2j_check(pattern)


@pytest.mark.parametrize("pattern", VALID + VALID_NOT_PYTHON)
def test_what_re2j_accepts_is_accepted(pattern: str) -> None:
    assert re2j_syntax_error(pattern) is None
    re2j_check(pattern)


def _python_accepts(pattern: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            re.compile(pattern)
        except re.error:
            return False
    return True


def test_the_languages_part_ways_where_the_table_says() -> None:
    """Not vacuous: Python's `re` would have answered these differently."""
    assert [p for p in VALID_NOT_PYTHON if _python_accepts(p)] == []
    refused = {pattern for pattern, _, _ in ERRORS}
    assert [p for p in PYTHON_NOT_VALID if not _python_accepts(p) or p not in refused] == []


def test_the_tool_prints_kafkas_line_and_needs_no_server(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["consumer-groups", "--validate-regex", "orders-.*"]) == 0
    assert capsys.readouterr() == ("The regular expression `orders-.*` is valid.\n", "")
    assert main(["consumer-groups", "--validate-regex", "orders-(.*"]) == 0
    assert capsys.readouterr() == ("The regular expression `orders-(.*` is invalid: missing closing ).\n", "")
    # The server is still required by every other action, in Kafka's words.
    assert main(["consumer-groups", "--list"]) == 1
    assert 'Missing required argument "[bootstrap-server]"' in capsys.readouterr().err
    # --validate-regex is an action of its own, as in Kafka.
    assert main(["consumer-groups", "--list", "--validate-regex", "a"]) == 1
