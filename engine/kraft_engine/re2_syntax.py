"""The regular-expression language Kafka checks with RE2J, and RE2J's words for what is wrong.

Kafka 4.1 validates a consumer-group topic regex (`kafka-consumer-groups --validate-regex`, and
the KIP-848 `SubscribedTopicRegex`) with `com.google.re2j.Pattern.compile` from RE2J 1.8, the
version its distribution ships, and prints `PatternSyntaxException.getDescription()`. Python's `re`
accepts a different language (lookarounds, backreferences, possessive quantifiers in 3.11, `\\Z`,
`(?x)`) and rejects what RE2J takes (`(?U)`, `\\pL`, `\\z`, `\\Q...\\E`, `(?<n>a)`), and the
C++ RE2 behind the Python bindings (google-re2) differs from RE2J 1.8 too: it accepts `\\C`,
script names newer than RE2J 1.8's Unicode 6.0 tables (`\\p{Adlam}`), repeated group names, and
`a{*`, which RE2J refuses as a nested repetition; it refuses `(a{1000}){1000}`, which RE2J
compiles; and its error texts are its own. So this module follows
RE2J 1.8's `Parser` (a port of an early Go `regexp/syntax`) step by step: the same scan, the same
checks in the same order, the same error descriptions and the same offending fragments. It keeps
only what decides validity: where the parse stack holds a `(` or a `|` marker (the "missing
argument" and "missing closing )" checks read nothing else), not the parsed tree.

Pure: no I/O. RE2J compiles what parses without further syntax errors, so parsing is the check.
One difference is left: RE2J simplifies and compiles with recursion, so a pattern nested 20000
groups deep ends Kafka's tool with a StackOverflowError (3000 deep still compiles), where this
module answers that the pattern is valid.
"""

from __future__ import annotations

from kraft_engine.errors import KraftError

__all__ = ["Re2jSyntaxError", "re2j_check", "re2j_syntax_error"]

# RE2J 1.8's Parser error descriptions.
_INTERNAL_ERROR = "regexp/syntax: internal error"
_INVALID_CHAR_RANGE = "invalid character class range"
_INVALID_ESCAPE = "invalid escape sequence"
_INVALID_NAMED_CAPTURE = "invalid named capture"
_INVALID_PERL_OP = "invalid or unsupported Perl syntax"
_INVALID_REPEAT_OP = "invalid nested repetition operator"
_INVALID_REPEAT_SIZE = "invalid repeat count"
_MISSING_BRACKET = "missing closing ]"
_MISSING_PAREN = "missing closing )"
_MISSING_REPEAT_ARGUMENT = "missing argument to repetition operator"
_TRAILING_BACKSLASH = "trailing backslash at end of expression"
_DUPLICATE_NAMED_CAPTURE = "duplicate capture group name"

_MAX_RUNE = 0x10FFFF
_MAX_REPEAT = 1000

# The names `\p{...}` takes in RE2J 1.8 (its UnicodeTables: Go 1.0's Unicode 6.0 categories and
# scripts, plus "Any").
_UNICODE_CATEGORIES = frozenset(
    ["C", "Cc", "Cf", "Co", "Cs", "L", "Ll", "Lm", "Lo", "Lt", "Lu", "M", "Mc", "Me", "Mn", "N", "Nd", "Nl", "No", "P", "Pc", "Pd", "Pe", "Pf", "Pi", "Po", "Ps", "S", "Sc", "Sk", "Sm", "So", "Z", "Zl", "Zp", "Zs"])
_UNICODE_SCRIPTS = frozenset(["Arabic", "Armenian", "Avestan", "Balinese", "Bamum", "Batak", "Bengali", "Bopomofo", "Brahmi", "Braille", "Buginese", "Buhid", "Canadian_Aboriginal", "Carian", "Cham", "Cherokee", "Common", "Coptic", "Cuneiform", "Cypriot", "Cyrillic", "Deseret", "Devanagari", "Egyptian_Hieroglyphs", "Ethiopic", "Georgian", "Glagolitic", "Gothic", "Greek", "Gujarati", "Gurmukhi", "Han", "Hangul", "Hanunoo", "Hebrew", "Hiragana", "Imperial_Aramaic", "Inherited", "Inscriptional_Pahlavi", "Inscriptional_Parthian", "Javanese", "Kaithi", "Kannada", "Katakana", "Kayah_Li", "Kharoshthi", "Khmer", "Lao", "Latin", "Lepcha", "Limbu", "Linear_B", "Lisu", "Lycian", "Lydian", "Malayalam", "Mandaic", "Meetei_Mayek", "Mongolian", "Myanmar", "New_Tai_Lue", "Nko", "Ogham", "Ol_Chiki", "Old_Italic", "Old_Persian", "Old_South_Arabian", "Old_Turkic", "Oriya", "Osmanya", "Phags_Pa", "Phoenician", "Rejang", "Runic", "Samaritan", "Saurashtra", "Shavian", "Sinhala", "Sundanese", "Syloti_Nagri", "Syriac", "Tagalog", "Tagbanwa", "Tai_Le", "Tai_Tham", "Tai_Viet", "Tamil", "Telugu", "Thaana", "Thai", "Tibetan", "Tifinagh", "Ugaritic", "Unknown", "Vai", "Yi"])
_UNICODE_NAMES = _UNICODE_CATEGORIES | _UNICODE_SCRIPTS | {"Any"}
_POSIX_CLASSES = frozenset(f"[:{sign}{name}:]" for sign in ("", "^") for name in (
    "alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper",
    "word", "xdigit"))
_PERL_CLASSES = frozenset(("\\d", "\\D", "\\s", "\\S", "\\w", "\\W"))

# The parse stack, reduced to what the checks read: a group's "(", an alternation's "|", or a
# parsed expression (consecutive ones count as one: nothing tells them apart).
_PAREN, _BAR, _EXPR = "(", "|", "x"


class Re2jSyntaxError(KraftError, ValueError):
    """RE2J's PatternSyntaxException: `description` is its getDescription(), `fragment` the part
    of the pattern it names (None where RE2J names none)."""

    def __init__(self, description: str, fragment: str | None) -> None:
        super().__init__(description, fragment)
        self.description = description
        self.fragment = fragment

    def __str__(self) -> str:
        """RE2J's getMessage()."""
        if self.fragment is None:
            return f"error parsing regexp: {self.description}"
        return f"error parsing regexp: {self.description}: `{self.fragment}`"


def re2j_syntax_error(pattern: str) -> Re2jSyntaxError | None:
    """What RE2J 1.8's Pattern.compile(pattern) refuses the pattern with, or None if it accepts it."""
    try:
        _Parser(pattern).parse()
    except Re2jSyntaxError as e:
        return e
    return None


def re2j_check(pattern: str) -> None:
    """Raise Re2jSyntaxError where RE2J 1.8 refuses the pattern."""
    _Parser(pattern).parse()


def _isalnum(c: str) -> bool:
    return "0" <= c <= "9" or "A" <= c <= "Z" or "a" <= c <= "z"


def _unhex(c: str) -> int:
    if "0" <= c <= "9":
        return ord(c) - ord("0")
    if "a" <= c <= "f":
        return ord(c) - ord("a") + 10
    if "A" <= c <= "F":
        return ord(c) - ord("A") + 10
    return -1


class _Parser:
    """RE2J's Parser.parseInternal in Perl mode (RE2.PERL: Perl syntax, Unicode groups), as a
    checker. Methods keep RE2J's names; `pos` is RE2J's StringIterator position."""

    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.pos = 0
        self.stack: list[str] = []
        self.names: set[str] = set()

    # -- the iterator -----------------------------------------------------------------------------
    def more(self) -> bool:
        return self.pos < len(self.text)

    def peek(self) -> str:
        return self.text[self.pos]

    def pop(self) -> str:
        c = self.text[self.pos]
        self.pos += 1
        return c

    def looking_at(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def rest(self) -> str:
        return self.text[self.pos:]

    def since(self, before: int) -> str:
        return self.text[before:self.pos]

    # -- the stack --------------------------------------------------------------------------------
    def push_expr(self) -> None:
        if not self.stack or self.stack[-1] != _EXPR:
            self.stack.append(_EXPR)

    def concat(self) -> None:
        """Everything above the topmost marker becomes one expression (an empty match if none)."""
        self.push_expr()

    def alternate(self) -> None:
        self.push_expr()

    def swap_vertical_bar(self) -> bool:
        """With a `|` under the top expression, the expression joins the alternatives below it and
        the `|` goes on top (RE2J merges or swaps; either leaves this shape)."""
        if len(self.stack) >= 2 and self.stack[-2] == _BAR:
            del self.stack[-2:]
            self.push_expr()
            self.stack.append(_BAR)
            return True
        return False

    # -- the parse --------------------------------------------------------------------------------
    def parse(self) -> None:
        last_repeat_pos = -1
        while self.more():
            repeat_pos = -1
            c = self.peek()
            if c == "(":
                if self.looking_at("(?"):
                    self.parse_perl_flags()
                else:
                    self.stack.append(_PAREN)
                    self.pos += 1
            elif c == "|":
                self.concat()
                if not self.swap_vertical_bar():
                    self.stack.append(_BAR)
                self.pos += 1
            elif c == ")":
                self.parse_right_paren()
                self.pos += 1
            elif c in "*+?":
                repeat_pos = self.pos
                self.pos += 1
                self.repeat(before=repeat_pos, last_repeat_pos=last_repeat_pos)
            elif c == "{":
                repeat_pos = self.pos
                if self.parse_repeat():
                    self.repeat(before=repeat_pos, last_repeat_pos=last_repeat_pos)
                else:  # not a repeat: `{` is a literal (and, in RE2J, still counts as the last repeat)
                    self.pos = repeat_pos + 1
                    self.push_expr()
            elif c == "[":
                self.parse_class()
            elif c == "\\":
                self.parse_backslash()
            else:  # a literal, ^, $ or .
                self.pos += 1
                self.push_expr()
            last_repeat_pos = repeat_pos
        self.concat()
        if self.swap_vertical_bar():
            self.stack.pop()
        self.alternate()
        if len(self.stack) != 1:
            raise Re2jSyntaxError(_MISSING_PAREN, self.text)

    def repeat(self, *, before: int, last_repeat_pos: int) -> None:
        if self.more() and self.peek() == "?":
            self.pos += 1  # non-greedy
        if last_repeat_pos != -1:
            raise Re2jSyntaxError(_INVALID_REPEAT_OP, self.since(last_repeat_pos))
        if not self.stack or self.stack[-1] != _EXPR:
            raise Re2jSyntaxError(_MISSING_REPEAT_ARGUMENT, self.since(before))

    def parse_repeat(self) -> bool:
        """`{min}`, `{min,}` or `{min,max}`: True past it; False where it is not of that form."""
        start = self.pos
        self.pos += 1  # '{'
        low = self.parse_int()
        if low == -1 or not self.more():
            return False
        if self.peek() != ",":
            high = low
        else:
            self.pos += 1
            if not self.more():
                return False
            if self.peek() == "}":
                high = -1
            else:
                high = self.parse_int()
                if high == -1:
                    return False
        if not self.more() or self.peek() != "}":
            return False
        self.pos += 1
        if low < 0 or low > _MAX_REPEAT or high == -2 or high > _MAX_REPEAT or (high >= 0 and low > high):
            raise Re2jSyntaxError(_INVALID_REPEAT_SIZE, self.since(start))
        return True

    def parse_int(self) -> int:
        """A decimal without leading zeros; -1 for none, -2 for more than 8 digits."""
        start = self.pos
        while self.more() and "0" <= self.peek() <= "9":
            self.pos += 1
        digits = self.since(start)
        if not digits or (len(digits) > 1 and digits[0] == "0"):
            return -1
        if len(digits) > 8:
            return -2
        return int(digits)

    def parse_perl_flags(self) -> None:
        start = self.pos
        s = self.rest()
        if s.startswith(("(?P<", "(?<")):
            begin = 4 if s[2] == "P" else 3
            end = s.find(">", begin)
            if end < 0:
                raise Re2jSyntaxError(_INVALID_NAMED_CAPTURE, s)
            name = s[begin:end]
            self.pos += end + 1
            if not name or not all(c == "_" or _isalnum(c) for c in name):
                raise Re2jSyntaxError(_INVALID_NAMED_CAPTURE, s[:end + 1])
            self.stack.append(_PAREN)
            if name in self.names:
                raise Re2jSyntaxError(_DUPLICATE_NAMED_CAPTURE, name)
            self.names.add(name)
            return
        self.pos += 2  # "(?"
        negated = False
        saw_flag = False
        while self.more():
            c = self.pop()
            if c in "imsU":
                saw_flag = True
            elif c == "-":
                if negated:
                    break
                negated = True
                saw_flag = False
            elif c in ":)":
                if negated and not saw_flag:
                    break
                if c == ":":
                    self.stack.append(_PAREN)
                return
            else:
                break
        raise Re2jSyntaxError(_INVALID_PERL_OP, self.since(start))

    def parse_right_paren(self) -> None:
        self.concat()
        if self.swap_vertical_bar():
            self.stack.pop()
        self.alternate()
        if len(self.stack) < 2:
            raise Re2jSyntaxError(_INTERNAL_ERROR, "stack underflow")
        self.stack.pop()
        if self.stack.pop() != _PAREN:
            raise Re2jSyntaxError(_MISSING_PAREN, self.text)
        self.push_expr()

    def parse_backslash(self) -> None:
        saved = self.pos
        self.pos += 1
        if self.more():
            c = self.pop()
            if c in "AbBz":
                self.push_expr()
                return
            if c == "C":
                raise Re2jSyntaxError(_INVALID_ESCAPE, "\\C")
            if c == "Q":  # \Q...\E: literals up to \E or the end
                end = self.text.find("\\E", self.pos)
                literal = self.rest() if end < 0 else self.text[self.pos:end]
                self.pos += len(literal) + 2
                if literal:
                    self.push_expr()
                return
            self.pos = saved
        if self.looking_at("\\p") or self.looking_at("\\P"):
            self.parse_unicode_class()
            self.push_expr()
            return
        if self.parse_perl_class_escape():
            self.push_expr()
            return
        self.pos = saved
        self.parse_escape()
        self.push_expr()

    def parse_escape(self) -> None:
        """One escaped character. Pre: at the backslash. Post: after the escape."""
        start = self.pos
        self.pos += 1
        if not self.more():
            raise Re2jSyntaxError(_TRAILING_BACKSLASH, None)
        c = self.pop()
        if not _isalnum(c):
            return  # escaped punctuation (and any non-ASCII character) is itself
        if (c in "1234567" and self.more() and "0" <= self.peek() <= "7") or c == "0":
            for _ in range(2):  # up to three octal digits
                if not self.more() or not "0" <= self.peek() <= "7":
                    break
                self.pos += 1
            return
        if c == "x" and self.parse_hex():
            return
        if c in "afnrtv":
            return
        raise Re2jSyntaxError(_INVALID_ESCAPE, self.since(start))

    def parse_hex(self) -> bool:
        """After `\\x`: two hex digits or `{hex}` at most U+10FFFF."""
        if not self.more():
            return False
        c = self.pop()
        if c == "{":
            value = digits = 0
            while True:
                if not self.more():
                    return False
                c = self.pop()
                if c == "}":
                    return digits > 0
                digit = _unhex(c)
                if digit < 0:
                    return False
                value = value * 16 + digit
                if value > _MAX_RUNE:
                    return False
                digits += 1
        if not self.more():
            return False
        second = self.pop()
        return _unhex(c) >= 0 and _unhex(second) >= 0

    def parse_perl_class_escape(self) -> bool:
        before = self.pos
        if not self.more() or self.pop() != "\\" or not self.more():
            return False
        self.pop()
        return self.since(before) in _PERL_CLASSES

    def parse_unicode_class(self) -> bool:
        """`\\pN`, `\\p{Name}`, `\\PN`, `\\p{^Name}`. Pre: at the backslash, or False."""
        start = self.pos
        if not (self.looking_at("\\p") or self.looking_at("\\P")):
            return False
        self.pos += 2
        if not self.more():
            self.pos = start
            raise Re2jSyntaxError(_INVALID_CHAR_RANGE, self.rest())
        c = self.pop()
        if c != "{":
            name = c
        else:
            end = self.text.find("}", self.pos)
            if end < 0:
                self.pos = start
                raise Re2jSyntaxError(_INVALID_CHAR_RANGE, self.rest())
            name = self.text[self.pos:end]
            self.pos = end + 1
        if name.startswith("^"):
            name = name[1:]
        if name not in _UNICODE_NAMES:
            raise Re2jSyntaxError(_INVALID_CHAR_RANGE, self.since(start))
        return True

    def parse_named_class(self) -> bool:
        """`[:alpha:]` and the like. Pre: at "[:"."""
        end = self.text.find(":]", self.pos)
        if end < 0:
            return False
        name = self.text[self.pos:end + 2]
        self.pos = end + 2
        if name not in _POSIX_CLASSES:
            raise Re2jSyntaxError(_INVALID_CHAR_RANGE, name)
        return True

    def parse_class_char(self, class_start: int) -> int:
        if not self.more():
            raise Re2jSyntaxError(_MISSING_BRACKET, self.since(class_start))
        if self.peek() == "\\":
            escape_start = self.pos
            self.parse_escape()
            return _escaped_rune(self.since(escape_start))
        return ord(self.pop())

    def parse_class(self) -> None:
        start = self.pos
        self.pos += 1  # '['
        if self.more() and self.peek() == "^":
            self.pos += 1
        first = True  # ']' is a member when it comes first
        while not self.more() or self.peek() != "]" or first:
            first = False
            before = self.pos
            if self.looking_at("[:"):
                if self.parse_named_class():
                    continue
                self.pos = before
            if self.parse_unicode_class():
                continue
            if self.parse_perl_class_escape():
                continue
            self.pos = before
            low = self.parse_class_char(start)
            if self.more() and self.peek() == "-":
                self.pos += 1
                if self.more() and self.peek() == "]":
                    self.pos -= 1  # [a-] is a and -
                else:
                    high = self.parse_class_char(start)
                    if high < low:
                        raise Re2jSyntaxError(_INVALID_CHAR_RANGE, self.since(before))
        self.pos += 1  # ']'
        self.push_expr()


def _escaped_rune(escape: str) -> int:
    """The code point of an escape parse_escape accepted (`\\n`, `\\x{41}`, `\\101`, `\\.`)."""
    body = escape[1:]
    if body[0] == "x":
        return int(body[2:-1] if body[1] == "{" else body[1:], 16)
    if body[0] in "01234567":
        return int(body, 8)
    controls = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
    return controls.get(body, ord(body[0]))
