"""What the admin tools read first: the `--bootstrap-server` (or `--bootstrap-controller`) list,
the `--command-config` properties (the admin client's security keys) and, for the tools that act
on a JSON plan (`kraft delete-records`, `kraft reassign-partitions`), the plan file's text, each
refused with the flag's name before anything is sent."""

from __future__ import annotations

from pathlib import Path

from kraft_engine.cli.main import CliError
from kraft_engine.protocol import parse_bootstrap_servers
from kraft_engine.protocol.security import ClientSecurity, SecurityConfigError, client_security
from kraft_engine.storage.java_properties import JavaPropertiesError, parse_properties

__all__ = ["COMMAND_CONFIG_HELP", "bootstrap_and_file", "bootstrap_servers", "command_config_security"]

COMMAND_CONFIG_HELP = "Property file containing configs to be passed to Admin Client."


def bootstrap_servers(text: str, *, flag: str = "--bootstrap-server") -> list[tuple[str, int]]:
    """The (host, port) list `flag` gives; a bad one is refused naming the flag."""
    try:
        return parse_bootstrap_servers(text)
    except ValueError as e:
        raise CliError(f"{flag}: {e}") from None


def bootstrap_and_file(bootstrap_server: str, *, flag: str, path: str, servers_flag: str = "--bootstrap-server"
                       ) -> tuple[list[tuple[str, int]], str]:
    """The parsed bootstrap servers (given with `servers_flag`) and the text of the file `flag` names."""
    bootstrap = bootstrap_servers(bootstrap_server, flag=servers_flag)
    try:
        return bootstrap, Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"cannot read {flag} {path}: {e}") from None


def command_config_security(path: str | None) -> ClientSecurity | None:
    """The security of the admin client a `--command-config` properties file asks for
    (security.protocol, ssl.*, sasl.*, as Kafka's AdminClientConfig reads them); None without one.
    Keys a Kafka admin client would take that do not concern security are accepted and left alone."""
    if path is None:
        return None
    try:
        props = parse_properties(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, JavaPropertiesError) as e:
        raise CliError(f"cannot read --command-config {path}: {e}") from None
    try:
        return client_security(props)
    except SecurityConfigError as e:
        raise CliError(f"--command-config {path}: {e}") from None
