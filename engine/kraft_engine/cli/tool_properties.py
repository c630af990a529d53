"""`key=value` options, as Kafka's tools take them (`--property`, `--producer-property`, ...)."""

from __future__ import annotations

from kraft_engine.cli.main import CliError

__all__ = ["parse_properties"]


def parse_properties(texts: list[str], *, flag: str) -> dict[str, str]:
    """Each `key=value` of a repeated option; a text without `=` is refused, naming the option."""
    properties = {}
    for text in texts:
        name, equals, value = text.partition("=")
        if not equals:
            raise CliError(f"{flag}: invalid property {text!r}, expected key=value")
        properties[name.strip()] = value
    return properties
