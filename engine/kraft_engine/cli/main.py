"""Entry point of the `kraft` command.

Each tool lives in its own module under `kraft_engine.cli` and exposes `register(subparsers)`,
which adds its sub-command and sets `func` on the parsed namespace. Tools are imported lazily by
name so that a broken or heavy tool never slows or breaks the others: a command line that names a
tool imports that tool's module only (a tool's imports cost about half a second of CPU, the whole
set about a second, and runbooks and tests start tools many times); `kraft --help` and an
unknown name import them all to list them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from kraft_engine.errors import KraftError

# (sub-command, module under kraft_engine.cli). Kept in the order `kraft --help` lists them.
_TOOLS: tuple[tuple[str, str], ...] = (
    ("quickstart", "quickstart"),
    ("storage", "storage"),
    ("dump-log", "dump_log"),
    ("server", "server"),
    ("metadata-quorum", "metadata_quorum"),
    ("features", "features"),
    ("topics", "topics"),
    ("acls", "acls"),
    ("configs", "configs"),
    ("console-producer", "console_producer"),
    ("console-consumer", "console_consumer"),
    ("consumer-groups", "consumer_groups"),
    ("log-dirs", "log_dirs"),
    ("get-offsets", "get_offsets"),
    ("producer-perf-test", "producer_perf_test"),
    ("consumer-perf-test", "consumer_perf_test"),
    ("delete-records", "delete_records"),
    ("reassign-partitions", "reassign_partitions"),
    ("sim", "sim"),
)


class CliError(KraftError):
    """A refusal the user should read: printed without a traceback, exit code 1."""


def build_parser(tool: str | None = None) -> argparse.ArgumentParser:
    """The parser with every tool, or with `tool`'s sub-command alone when that names one."""
    parser = argparse.ArgumentParser(prog="kraft", description="kraftwerk's KRaft engine tools")
    sub = parser.add_subparsers(dest="tool", metavar="TOOL")
    sub.required = True
    named = [entry for entry in _TOOLS if entry[0] == tool]
    for _name, module_name in named or _TOOLS:
        try:
            module = importlib.import_module(f"kraft_engine.cli.{module_name}")
        except ModuleNotFoundError as e:
            if e.name == f"kraft_engine.cli.{module_name}":
                continue  # that tool has not been written yet
            raise
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(arguments[0] if arguments else None)
    try:
        args = parser.parse_args(arguments)
    except SystemExit as e:
        # Kafka's tools exit 1 on a usage error (CommandLineUtils.printUsageAndExit); argparse's 2
        # would make a script that checks for Kafka's status miss it. --help still exits 0.
        return 1 if e.code == 2 else int(e.code or 0)
    args.tool_arguments = arguments[1:]  # the tool's own arguments (kafka-configs prints them back)
    try:
        rc = args.func(args)
    except CliError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
