"""What the admin tools read first: the `--bootstrap-server` (or `--bootstrap-controller`) list
and, for the tools that act on a JSON plan (`kraft delete-records`, `kraft reassign-partitions`),
the plan file's text, each refused with the flag's name before anything is sent."""

from __future__ import annotations

from pathlib import Path

from kraft_engine.cli.main import CliError
from kraft_engine.protocol import parse_bootstrap_servers

__all__ = ["bootstrap_and_file", "bootstrap_servers"]


def bootstrap_servers(text: str, *, flag: str = "--bootstrap-server") -> list[tuple[str, int]]:
    """The (host, port) list `flag` gives; a bad one is refused naming the flag."""
    try:
        return parse_bootstrap_servers(text)
    except ValueError as e:
        raise CliError(f"{flag}: {e}") from None


def bootstrap_and_file(bootstrap_server: str, *, flag: str, path: str) -> tuple[list[tuple[str, int]], str]:
    """The parsed bootstrap servers and the text of the file `flag` names."""
    bootstrap = bootstrap_servers(bootstrap_server)
    try:
        return bootstrap, Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {flag} {path}: {e}") from None
