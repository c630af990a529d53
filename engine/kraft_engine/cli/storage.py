"""`kraft storage`: Kafka's `kafka-storage.sh` for kraftwerk nodes (random-uuid, info, format,
version-mapping, feature-dependencies).

Same verbs, flags and messages as Kafka's StorageTool, so runbooks carry over. The rules and the
disk writes live in `kraft_engine.storage.formatter`; this module only maps flags and prints.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path
from typing import TextIO

from kraft_engine.cli.main import CliError
from kraft_engine.cli.scram_arguments import ScramArgumentError, parse_scram_argument
from kraft_engine.kafka_uuid import random_uuid, to_kafka_str
from kraft_engine.records import feature_versions, metadata_version
from kraft_engine.server.config import ConfigError, KafkaConfig, load_config
from kraft_engine.storage.formatter import FormatRequest, FormatterError, format_storage
from kraft_engine.storage.meta_properties import (
    META_PROPERTIES_FILE_NAME,
    MetaProperties,
    MetaPropertiesEnsemble,
)

__all__ = ["info", "register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "storage",
        help="format and inspect a node's log directories (like kafka-storage)",
        description="The kraftwerk storage tool, with the verbs and flags of Kafka's kafka-storage.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    info_parser = sub.add_parser("info", help="Get information about the log directories on this node.")
    _add_config_argument(info_parser)
    info_parser.set_defaults(func=_run_info)

    format_parser = sub.add_parser("format", help="Format the log directories on this node.")
    _add_config_argument(format_parser)
    format_parser.add_argument("--cluster-id", "-t", required=True, help="The cluster ID to use.")
    format_parser.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="Skip over already formatted directories rather than failing.",
    )
    format_parser.add_argument(
        "--release-version",
        "-r",
        help="The initial metadata.version: a release (3.9), an exact version (3.9-IV0) or a level (21). "
        "The default is the engine's latest production version.",
    )
    format_parser.add_argument(
        "--feature",
        "-f",
        action="append",
        default=[],
        metavar="FEATURE",
        help="The setting to use for a specific feature, in feature=level format. For example: `kraft.version=1`.",
    )
    format_parser.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="SCRAM_CREDENTIAL",
        help="A SCRAM_CREDENTIAL to add to the __cluster_metadata log e.g. 'SCRAM-SHA-256=[name=alice,"
        "password=alice-secret]' or 'SCRAM-SHA-512=[name=alice,iterations=8192,salt=\"N3E=\",saltedpassword=\"YCE=\"]'",
    )
    quorum = format_parser.add_mutually_exclusive_group()
    quorum.add_argument(
        "--standalone", "-s", action="store_true", help="Initialize a controller as a single-node dynamic quorum."
    )
    quorum.add_argument(
        "--no-initial-controllers",
        "-N",
        action="store_true",
        help="Initialize a server that will join an existing dynamic quorum later.",
    )
    quorum.add_argument(
        "--initial-controllers",
        "-I",
        metavar="ID@HOST:PORT:DIRECTORY_ID,...",
        help="Initialize a server with a specific dynamic quorum. The same value must be used to format "
        "every node, e.g. 1@c1:9093:JEXY6aqzQY-32P5TStzaFg,2@c2:9093:MvDxzVmcRsaTz33bUuRU6A",
    )
    format_parser.set_defaults(func=_run_format)

    mapping_parser = sub.add_parser(
        "version-mapping",
        help="Look up the corresponding features for a given metadata version. Using the command with no "
        "--release-version argument will return the mapping for the latest stable metadata version",
    )
    mapping_parser.add_argument(
        "--release-version", "-r", help="The release version to use for the corresponding feature mapping."
    )
    mapping_parser.set_defaults(func=_run_version_mapping)

    dependencies_parser = sub.add_parser(
        "feature-dependencies",
        help="Look up dependencies for a given feature version. If the feature is not known or the version "
        "not yet defined, an error is thrown. Multiple features can be specified.",
    )
    dependencies_parser.add_argument(
        "--feature", "-f", required=True, action="append", metavar="FEATURE",
        help="The feature and version to look up dependencies for, in feature=version format. For example: "
        "`metadata.version=5`.",
    )
    dependencies_parser.set_defaults(func=_run_feature_dependencies)

    uuid_parser = sub.add_parser("random-uuid", help="Print a random UUID.")
    uuid_parser.set_defaults(func=_run_random_uuid)


def _add_config_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", required=True, help="The server.properties file to use.")


def _load(path: str) -> KafkaConfig:
    try:
        return load_config(path)
    except ConfigError as e:
        # Errors reading the file already name it; errors about a key do not.
        message = str(e)
        raise CliError(message if path in message else f"{path}: {message}") from None


def _run_random_uuid(args: argparse.Namespace) -> int:
    print(to_kafka_str(random_uuid()))
    return 0


def _run_format(args: argparse.Namespace) -> int:
    config = _load(args.config)
    try:
        request = FormatRequest.from_config(
            config,
            cluster_id=args.cluster_id,
            release_version=args.release_version,
            standalone=args.standalone,
            initial_controllers=args.initial_controllers,
            no_initial_controllers=args.no_initial_controllers,
            ignore_formatted=args.ignore_formatted,
            features=args.feature,
        )
        if args.add_scram:
            if not metadata_version.from_feature_level(request.metadata_version_level).is_scram_supported:
                raise FormatterError("SCRAM is only supported in metadata.version 3.5-IV2 or later.")
            request = dataclasses.replace(
                request, scram_credentials=tuple(parse_scram_argument(a) for a in args.add_scram))
        format_storage(request, out=sys.stdout, now_ms=int(time.time() * 1000))
    except ScramArgumentError as e:
        raise CliError(str(e)) from None
    except FormatterError as e:
        raise CliError(str(e)) from None
    except OSError as e:
        raise CliError(f"cannot write {e.filename}: {e.strerror}") from None
    return 0


def _run_version_mapping(args: argparse.Namespace) -> int:
    return version_mapping(args.release_version, out=sys.stdout)


def version_mapping(release_version: str | None, *, out: TextIO) -> int:
    """Kafka's `kafka-storage version-mapping`: the level of every production feature a release
    starts with (the release as given is echoed, as Kafka does)."""
    shown = release_version if release_version is not None else str(metadata_version.LATEST_PRODUCTION)
    try:
        version = metadata_version.from_version_string(shown)
    except ValueError:
        raise CliError(
            f"Unknown release version '{shown}'. Supported versions are: {metadata_version.MINIMUM} to "
            f"{metadata_version.LATEST_PRODUCTION}"
        ) from None
    print(f"metadata.version={version.feature_level} ({shown})", file=out)
    for definition in feature_versions.FEATURES:
        print(f"{definition.name}={definition.default_level(version)}", file=out)
    return 0


def _run_feature_dependencies(args: argparse.Namespace) -> int:
    return feature_dependencies(args.feature, out=sys.stdout)


def feature_dependencies(features: list[str], *, out: TextIO) -> int:
    """Kafka's `kafka-storage feature-dependencies`: what each `name=level` needs."""
    for text in features:
        name, equals, level_text = text.partition("=")
        if not equals:
            raise CliError(f"Can't parse feature=level string {text}: equals sign not found.")
        try:
            level = int(level_text)
        except ValueError:
            raise CliError(f"Invalid version format: {level_text} for feature {name}") from None
        if name == metadata_version.FEATURE_NAME:
            try:
                version = metadata_version.from_feature_level(level)
            except ValueError:
                raise CliError(f"Unknown metadata.version {level}") from None
            print(f"{name}={level} ({version}) has no dependencies.", file=out)
            continue
        definition = feature_versions.feature(name)
        if definition is None:
            raise CliError(f"Unknown feature: {name}")
        try:
            found = definition.version(level, unstable_enabled=True)
        except feature_versions.FeatureLevelError:
            raise CliError(f"Feature level {level} is not supported for feature {name}") from None
        if not found.dependencies:
            print(f"{name}={level} has no dependencies.", file=out)
            continue
        print(f"{name}={level} requires:", file=out)
        for dependency, needed in found.dependencies.items():
            if dependency == metadata_version.FEATURE_NAME:
                print(f"    {dependency}={needed} ({metadata_version.from_feature_level(needed)})", file=out)
            else:
                print(f"    {dependency}={needed}", file=out)
    return 0


def _run_info(args: argparse.Namespace) -> int:
    return info(_load(args.config), out=sys.stdout)


def info(config: KafkaConfig, *, out: TextIO) -> int:
    """Print Kafka's `storage info` report for the node's directories; 1 when a problem is found.

    After Kafka's sections (found directories, the first directory's metadata, problems) it lists
    the state of every directory, which Kafka leaves to the reader to infer from the problems.
    """
    directories = [Path(d) for d in config.all_log_dirs]
    ensemble = MetaPropertiesEnsemble.load(directories, metadata_log_dir=Path(config.metadata_log_dir))
    problems: list[str] = []
    found: list[Path] = []
    first: MetaProperties | None = None
    states: list[str] = []
    for directory in directories:
        if not directory.is_dir():
            reason = "is not a directory" if directory.exists() else "does not exist"
            problems.append(f"{directory} {reason}")
            states.append(f"{directory}: missing ({reason})")
            continue
        found.append(directory)
        if directory in ensemble.errors:
            problems.append(f"Error loading {directory / META_PROPERTIES_FILE_NAME}: {ensemble.errors[directory]}")
            states.append(f"{directory}: error ({ensemble.errors[directory]})")
            continue
        meta = ensemble.formatted.get(directory)
        if meta is None:
            problems.append(f"{directory} is not formatted.")
            states.append(f"{directory}: empty (not formatted)")
            continue
        states.append(f"{directory}: formatted {_render(meta)}")
        if first is None:
            first = meta
        elif first.cluster_id != meta.cluster_id:
            problems.append("Mismatched cluster IDs between storage directories.")
        elif first.node_id != meta.node_id:
            problems.append("Mismatched node IDs between storage directories.")
    if first is not None:
        if first.version == 0:
            problems.append(
                "The kafka configuration file appears to be for a cluster in KRaft mode, but the directories "
                "are formatted for legacy mode."
            )
        if first.node_id is not None and first.node_id != config.node_id:
            problems.append(
                f"The directories belong to node.id {first.node_id}, but the configuration says node.id "
                f"{config.node_id}."
            )

    if found:
        print("Found log directory:" if len(found) == 1 else "Found log directories:", file=out)
        for directory in found:
            print(f"  {directory}", file=out)
        print("", file=out)
    if first is not None:
        print(f"Found metadata: {_render(first)}", file=out)
        print("", file=out)
    if problems:
        print("Found problem:" if len(problems) == 1 else "Found problems:", file=out)
        for problem in problems:
            print(f"  {problem}", file=out)
        print("", file=out)
    print("Log directory states:", file=out)
    for state in states:
        print(f"  {state}", file=out)
    return 1 if problems else 0


def _render(meta: MetaProperties) -> str:
    """Java's TreeMap.toString of the properties, as Kafka prints them."""
    properties = meta.to_properties()
    return "{" + ", ".join(f"{k}={properties[k]}" for k in sorted(properties)) + "}"
