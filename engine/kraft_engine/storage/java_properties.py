"""Java `.properties` syntax, read and written the way `java.util.Properties` does it.

`meta.properties` is written by Kafka with `Properties.store` and read with `Properties.load`,
and operators edit it by hand, so our parser has to accept everything Java accepts for such
files: `#`/`!` comments, `=`, `:` or whitespace separators, surrounding whitespace, backslash
line continuations and escapes (`\\t`, `\\n`, `\\uXXXX`, `\\=`...). The writer escapes exactly what
Java escapes so Java reads back the same keys and values.
"""

from __future__ import annotations

import re

from kraft_engine.errors import StorageError

__all__ = ["JavaPropertiesError", "format_properties", "parse_properties"]

_WHITESPACE = " \t\f"
_SEPARATORS = "=:"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class JavaPropertiesError(StorageError, ValueError):
    """Malformed properties text (only a bad `\\uXXXX` escape is malformed in Java's grammar)."""


def _logical_lines(text: str) -> list[str]:
    lines = re.split(r"\r\n|\r|\n", text)
    logical: list[str] = []
    pending: str | None = None
    for natural in lines:
        line = natural.lstrip(_WHITESPACE) if pending is not None else natural
        if pending is None:
            stripped = line.lstrip(_WHITESPACE)
            if not stripped or stripped[0] in "#!":
                continue
        trailing = len(line) - len(line.rstrip("\\"))
        continues = trailing % 2 == 1
        if continues:
            line = line[:-1]
        pending = line if pending is None else pending + line
        if not continues:
            logical.append(pending)
            pending = None
    if pending is not None:
        logical.append(pending)
    return logical


def _unescape(raw: str, *, what: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch != "\\" or i + 1 >= len(raw):
            out.append(ch)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise JavaPropertiesError(f"malformed \\uxxxx encoding in {what}: {raw!r}")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_SIMPLE_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def _split_key(line: str) -> tuple[str, str]:
    line = line.lstrip(_WHITESPACE)
    i = 0
    while i < len(line):
        ch = line[i]
        if ch == "\\":
            i += 2
            continue
        if ch in _SEPARATORS or ch in _WHITESPACE:
            break
        i += 1
    key, rest = line[:i], line[i:]
    rest = rest.lstrip(_WHITESPACE)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_WHITESPACE)
    return key, rest


def parse_properties(text: str) -> dict[str, str]:
    """Parse properties text; later duplicates win, as in Java."""
    result: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _split_key(line)
        name = _unescape(key, what="a key")
        # Naming the key tells the user which setting to fix.
        result[name] = _unescape(value, what=f"the value of {name}")
    return result


def _escape(text: str, *, is_key: bool) -> str:
    out: list[str] = []
    for index, ch in enumerate(text):
        if ch == " ":
            # Java escapes every space in a key but only a leading space in a value.
            out.append("\\ " if is_key or index == 0 else " ")
        elif ch in "\t\n\r\f":
            out.append("\\" + {"\t": "t", "\n": "n", "\r": "r", "\f": "f"}[ch])
        elif ch in "=:#!\\":
            out.append("\\" + ch)
        elif ord(ch) < 0x20:
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return "".join(out)


def format_properties(entries: dict[str, str], *, comments: tuple[str, ...] = ()) -> str:
    """Render `entries` in insertion order, preceded by `#`-comment lines, with `\\n` line ends."""
    lines = [f"#{c}" for c in comments]
    lines.extend(f"{_escape(k, is_key=True)}={_escape(v, is_key=False)}" for k, v in entries.items())
    return "".join(line + "\n" for line in lines)
