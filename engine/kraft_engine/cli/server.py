"""`kraft server start`: run one node from a server.properties file (Kafka's kafka-server-start).

The process serves until SIGTERM or SIGINT, then shuts down gracefully: a leader resigns with
EndQuorumEpoch, the log is flushed and every socket and file is closed before it exits 0. It
refuses to start (exit 1, "Error: ...") on a bad config or on storage it must not use. A fatal
fault while serving (a failed write or fsync of its storage, an invariant) exits 1 after the one
ERROR line the node logged.
`--override key=value` (repeatable) changes single keys, as Kafka's `--override` does.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from kraft_engine.cli.main import CliError
from kraft_engine.server.broker_node import BrokerNode
from kraft_engine.server.combined_node import CombinedNode
from kraft_engine.server.config import ConfigError, load_config, parse_config
from kraft_engine.server.controller_node import ControllerNode, StartupError
from kraft_engine.server.controller_runtime import ControllerFatalError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("server", help="run a KRaft node", description="Run a KRaft node.")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    start = verbs.add_parser("start", help="start a node from server.properties and serve until SIGTERM")
    start.add_argument("--config", "-c", required=True, help="the node's server.properties")
    start.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="override one config key (repeatable)"
    )
    start.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    start.set_defaults(func=_start)


def _start(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s",
    )
    try:
        config = load_config(args.config)
        if args.override:
            properties = dict(config.originals)
            for item in args.override:
                key, sep, value = item.partition("=")
                if not sep or not key.strip():
                    raise CliError(f"--override {item!r} is not KEY=VALUE")
                properties[key.strip()] = value
            config = parse_config(properties)
    except (ConfigError, OSError) as e:
        raise CliError(str(e)) from None
    try:
        node: ControllerNode | BrokerNode | CombinedNode
        if config.is_broker and config.is_controller:
            node = CombinedNode.open(config, config_path=args.config)
        elif config.is_broker:
            node = BrokerNode.open(config)
        else:
            node = ControllerNode.open(config, config_path=args.config)
    except StartupError as e:
        raise CliError(str(e)) from None
    try:
        asyncio.run(_serve(node))
    except StartupError as e:
        raise CliError(str(e)) from None
    except ControllerFatalError as e:
        if e.logged:
            return 1  # the node logged its one ERROR line; repeating it would be noise
        raise CliError(str(e)) from None
    return 0


async def _serve(node: ControllerNode | BrokerNode | CombinedNode) -> None:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, node.stop)
    try:
        await node.run()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)

