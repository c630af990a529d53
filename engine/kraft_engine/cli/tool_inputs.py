"""What the admin tools that act on a JSON plan read first (`kraft delete-records`,
`kraft reassign-partitions`): the `--bootstrap-server` list and the plan file's text, each refused
with the flag's name before anything is sent."""

from __future__ import annotations

from pathlib import Path

from kraft_engine.cli.main import CliError
from kraft_engine.protocol import parse_bootstrap_servers

__all__ = ["bootstrap_and_file"]


def bootstrap_and_file(bootstrap_server: str, *, flag: str, path: str) -> tuple[list[tuple[str, int]], str]:
    """The parsed bootstrap servers and the text of the file `flag` names."""
    try:
        bootstrap = parse_bootstrap_servers(bootstrap_server)
    except ValueError as e:
        raise CliError(f"--bootstrap-server: {e}") from None
    try:
        return bootstrap, Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {flag} {path}: {e}") from None
