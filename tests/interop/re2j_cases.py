"""Patterns and what RE2J 1.8 (Kafka 4.1's regex check) says of them: every error class of its
parser, and patterns where RE2J's language and Python's `re` part ways.

`tests/cli/test_consumer_groups_validate_regex.py` holds kraftwerk's checker to these;
`test_kafka_validate_regex.py` asks Kafka's own classes the same patterns, so the table is RE2J's
word, not ours.
"""

from __future__ import annotations

# (pattern, RE2J's description or None for valid, RE2J's offending fragment)
ERRORS: tuple[tuple[str, str, str | None], ...] = (
    ("a(b", "missing closing )", "a(b"),
    ("a|(b", "missing closing )", "a|(b"),
    (")", "regexp/syntax: internal error", "stack underflow"),
    ("a)", "regexp/syntax: internal error", "stack underflow"),
    ("(a))", "regexp/syntax: internal error", "stack underflow"),
    ("x|)", "regexp/syntax: internal error", "stack underflow"),
    ("(?P<na-me>a)", "invalid named capture", "(?P<na-me>"),
    ("(?<name", "invalid named capture", "(?<name"),
    ("(?P<>a)", "invalid named capture", "(?P<>"),
    ("(?<=a)b", "invalid named capture", "(?<=a)b"),
    ("(?P<n>a)(?P<n>b)", "duplicate capture group name", "n"),
    ("(?P=n)", "invalid or unsupported Perl syntax", "(?P"),
    ("(?=a)", "invalid or unsupported Perl syntax", "(?="),
    ("(?!a)", "invalid or unsupported Perl syntax", "(?!"),
    ("(?#note)a", "invalid or unsupported Perl syntax", "(?#"),
    ("(?x)a", "invalid or unsupported Perl syntax", "(?x"),
    ("(?i-)a", "invalid or unsupported Perl syntax", "(?i-)"),
    ("(?--i)a", "invalid or unsupported Perl syntax", "(?--"),
    ("(?i", "invalid or unsupported Perl syntax", "(?i"),
    ("a{1001}", "invalid repeat count", "{1001}"),
    ("a{2,1}", "invalid repeat count", "{2,1}"),
    ("a{123456789}", "invalid repeat count", "{123456789}"),
    ("a{0,1001}", "invalid repeat count", "{0,1001}"),
    ("*a", "missing argument to repetition operator", "*"),
    ("(*)", "missing argument to repetition operator", "*"),
    ("a|+", "missing argument to repetition operator", "+"),
    ("(?i)*?", "missing argument to repetition operator", "*?"),
    ("{2}", "missing argument to repetition operator", "{2}"),
    ("a**", "invalid nested repetition operator", "**"),
    ("a*+", "invalid nested repetition operator", "*+"),
    ("a+??", "invalid nested repetition operator", "+??"),
    ("a{2}{3}", "invalid nested repetition operator", "{2}{3}"),
    ("a{*", "invalid nested repetition operator", "{*"),
    ("**", "missing argument to repetition operator", "*"),
    ("[z-a]", "invalid character class range", "z-a"),
    ("[[:foo:]]", "invalid character class range", "[:foo:]"),
    ("\\p{Adlam}", "invalid character class range", "\\p{Adlam}"),
    ("\\pX", "invalid character class range", "\\pX"),
    ("\\p", "invalid character class range", "\\p"),
    ("\\p{Greek", "invalid character class range", "\\p{Greek"),
    ("[\\p{Foo}]", "invalid character class range", "\\p{Foo}"),
    ("a\\", "trailing backslash at end of expression", None),
    ("[a\\", "trailing backslash at end of expression", None),
    ("\\8", "invalid escape sequence", "\\8"),
    ("(a)\\1", "invalid escape sequence", "\\1"),
    ("\\Z", "invalid escape sequence", "\\Z"),
    ("\\C", "invalid escape sequence", "\\C"),
    ("\\E", "invalid escape sequence", "\\E"),
    ("\\x{110000}", "invalid escape sequence", "\\x{110000"),
    ("\\x{}", "invalid escape sequence", "\\x{}"),
    ("\\xZ1", "invalid escape sequence", "\\xZ1"),
    ("[\\b]", "invalid escape sequence", "\\b"),
    ("[a-\\d]", "invalid escape sequence", "\\d"),
    ("[a", "missing closing ]", "[a"),
    ("[]", "missing closing ]", "[]"),
    ("[a-", "missing closing ]", "[a-"),
    ("[^", "missing closing ]", "[^"),
)

# Valid for RE2J; Python's `re` refuses each.
VALID_NOT_PYTHON: tuple[str, ...] = (
    "\\pL+", "\\p{Greek}", "\\PN", "\\p{^Han}", "[\\p{Lu}\\d]", "\\Qa.b*\\E", "\\x{1F600}", "(?U)a*",
    "[\\d-z]", "\\z", "(?<n>a)",
)

# Valid for Python's `re`; RE2J refuses each (the description is in ERRORS).
PYTHON_NOT_VALID: tuple[str, ...] = (
    "(?<=a)b", "(?=a)", "(?!a)", "(?#note)a", "(?x)a", "(a)\\1", "\\Z", "[\\b]", "a*+", "a{*",
)

# Valid for both (the everyday topic regexes, and RE2J's corners).
VALID: tuple[str, ...] = (
    "orders-.*", "^(payments|refunds)\\.v[0-9]+$", "topic_[a-z]{2,5}", "(?i)Events", "a{,2}", "a{01}", "{",
    "x{", "a{1000}", "a{2,}", "[]a]", "[a-]", "[^\\n]", "[[:alpha:][:^digit:]]", "[[:alpha]", "\\Qab", "\\Q\\E",
    "(?i)(?-i:a)", "(?ims-U:a)", "(?P<name_1>x)(?<other>y)", "a|", "|", "()", "(|a)*", "^*", "$+", "\\b?",
    "\\x41\\x{10FFFF}\\101\\0\\a\\f\\t\\n\\r\\v", "\\.\\-\\_\\é", "[\\x00-\\x{10FFFF}]", "\\pN\\p{Any}",
    "a*?b+?c??d{2}?", "", "((a))", "(?:)", "[\\-]", "é+",
)
