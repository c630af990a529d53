"""The principal of an mTLS client: its certificate's subject, mapped by `ssl.principal.mapping.rules`.

Kafka names an SSL client `User:<distinguished name>` (RFC 2253, as Java's X500Principal prints
it: the last RDN first, `CN=alice,OU=eng,O=corp`), and `ssl.principal.mapping.rules` rewrites the
name: a comma-separated list of `DEFAULT` (the name as it is) and `RULE:pattern/replacement/[LU]`
(when the pattern matches the whole name, every match is replaced; `L`/`U` lower- or upper-case
the result). The first rule that applies wins; when none does, the client is refused, as Kafka's
`SslPrincipalMapper` refuses it. Replacements use Java's syntax (`$1` a group, `\\` escapes), and
a reference to a group the pattern lacks stays literal text, as in Kafka.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kraft_engine.protocol.errors import KafkaProtocolError

__all__ = ["NoMatchingRule", "SslPrincipalMapper", "subject_name"]

_RULE = r"(DEFAULT)|RULE:((\\.|[^\\/])*)/((\\.|[^\\/])*)/([LU]?).*?|(.*?)"
_SPLITTER = re.compile(r"\s*(" + _RULE + r")\s*(,\s*|$)")
_PARSER = re.compile(_RULE)


class NoMatchingRule(KafkaProtocolError, ValueError):
    """No rule of `ssl.principal.mapping.rules` applies to a certificate's name."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    lower: bool = False
    upper: bool = False

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        result = self.pattern.sub(lambda m: _java_replacement(self.replacement, m), name)
        if self.lower:
            return result.lower()
        if self.upper:
            return result.upper()
        return result

    def __str__(self) -> str:
        if self.pattern is None:
            return "DEFAULT"
        suffix = "/L" if self.lower else "/U" if self.upper else ""
        return f"RULE:{self.pattern.pattern}/{self.replacement}{suffix}"


def _java_replacement(template: str, match: re.Match[str]) -> str:
    """Java's Matcher.appendReplacement: `\\x` is x, `$n` the longest valid group number."""
    groups = match.re.groups
    out: list[str] = []
    i = 0
    while i < len(template):
        char = template[i]
        if char == "\\" and i + 1 < len(template):
            out.append(template[i + 1])
            i += 2
            continue
        if char == "$" and i + 1 < len(template) and template[i + 1].isdigit():
            j = i + 1
            number = int(template[j])
            j += 1
            while j < len(template) and template[j].isdigit() and number * 10 + int(template[j]) <= groups:
                number = number * 10 + int(template[j])
                j += 1
            if number > groups:  # Kafka escapes a reference to a missing group: literal text
                out.append(template[i:j])
            else:
                out.append(match.group(number) or "")
            i = j
            continue
        out.append(char)
        i += 1
    return "".join(out)


class SslPrincipalMapper:
    """`ssl.principal.mapping.rules`, parsed once; `name(dn)` maps one certificate subject."""

    def __init__(self, rules: str | None = "DEFAULT") -> None:
        text = "DEFAULT" if rules is None else rules.strip()
        self.rules: tuple[_Rule, ...] = tuple(_parse(rule) for rule in _split(text) if rule)

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"No rules apply to {distinguished_name}, rules [{', '.join(map(str, self.rules))}]")


def _split(text: str) -> list[str]:
    rules: list[str] = []
    position = 0
    while position <= len(text):
        match = _SPLITTER.search(text, position)
        if match is None:
            break
        rules.append(match.group(1))
        position = match.end() if match.end() > position else position + 1
    return rules


def _parse(rule: str) -> _Rule:
    match = _PARSER.match(rule)
    if match is None:
        raise ValueError(f"Invalid rule: {rule}")
    if match.end() != len(rule):
        raise ValueError(f"Invalid rule: `{rule}`, unmatched substring: `{rule[match.end():]}`")
    if match.group(1) is not None:
        return _Rule(pattern=None)
    if match.group(2) is None:
        raise ValueError(f"Invalid rule: {rule}")
    try:
        pattern = re.compile(match.group(2))
    except re.error as e:
        raise ValueError(f"Invalid rule: `{rule}`: {e}") from None
    return _Rule(pattern=pattern, replacement=match.group(4), lower=match.group(6) == "L", upper=match.group(6) == "U")


def subject_name(der_certificate: bytes) -> str:
    """A certificate's subject as Java's X500Principal.getName() prints it (RFC 2253)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der_certificate).subject.rfc4514_string()
