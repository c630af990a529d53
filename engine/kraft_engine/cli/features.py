"""`kraft features`: Kafka's kafka-features tool against the controller quorum.

`describe` prints what a controller advertises in ApiVersions (supported ranges, finalized
levels, the finalized-features epoch) in kafka-features' line format; `upgrade`, `downgrade` and
`disable` send UpdateFeatures to the active controller (`--dry-run` is validate-only) and print
one line per feature as kafka-features does, failing with "N out of M operation(s) failed."
"""

from __future__ import annotations

import argparse
import asyncio

from kio.schema.errors import ErrorCode
from kio.schema.update_features.v1.request import FeatureUpdateKey, UpdateFeaturesRequest
from kio.static.primitive import i8, i16

from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.records import metadata_version

__all__ = ["register"]

_UPGRADE, _SAFE_DOWNGRADE, _UNSAFE_DOWNGRADE = 1, 2, 3


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("features", help="Manage feature flags (kafka-features)",
                                   description="This tool manages feature flags in Kafka.")
    parser.add_argument("--bootstrap-controller", required=True,
                        help="A comma-separated list of host:port pairs to use for establishing the connection "
                             "to the KRaft quorum.")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    parser.add_argument("--timeout-ms", type=int, default=30000, help="How long to retry (default 30000).")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    commands.add_parser("describe", help="Describes the current active feature flags.")
    upgrade = commands.add_parser("upgrade", help="Upgrade one or more feature flags.")
    upgrade.add_argument("--metadata", help="The level to which we should upgrade the metadata. For example, 3.3-IV3.")
    upgrade.add_argument("--feature", action="append",
                         help="A feature upgrade we should perform, in feature=level format.")
    upgrade.add_argument("--dry-run", action="store_true", help="Validate this upgrade, but do not perform it.")
    downgrade = commands.add_parser("downgrade", help="Downgrade one or more feature flags.")
    downgrade.add_argument("--metadata", help="The level to which we should downgrade the metadata. For example, 3.3-IV0.")
    downgrade.add_argument("--feature", action="append",
                           help="A feature downgrade we should perform, in feature=level format.")
    downgrade.add_argument("--unsafe", action="store_true",
                           help="Perform this downgrade even if it may irreversibly destroy metadata.")
    downgrade.add_argument("--dry-run", action="store_true", help="Validate this downgrade, but do not perform it.")
    disable = commands.add_parser("disable", help="Disable one or more feature flags (downgrade to zero).")
    disable.add_argument("--feature", action="append", help="A feature flag to disable.")
    disable.add_argument("--unsafe", action="store_true",
                         help="Disable this feature flag even if it may irreversibly destroy metadata.")
    disable.add_argument("--dry-run", action="store_true", help="Perform a dry-run of this disable operation.")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    bootstrap = bootstrap_servers(args.bootstrap_controller, flag="--bootstrap-controller")
    security = command_config_security(args.command_config)
    if args.command == "describe":
        return asyncio.run(_describe(bootstrap, timeout_ms=args.timeout_ms, security=security))
    updates = _updates(args)
    return asyncio.run(_update(bootstrap, op=args.command, updates=updates, dry_run=args.dry_run,
                               timeout_ms=args.timeout_ms, security=security))


def level_to_string(feature: str, level: int) -> str:
    """metadata.version levels print as their release names; others as numbers."""
    if feature == metadata_version.FEATURE_NAME:
        try:
            return metadata_version.from_feature_level(level).version
        except ValueError:
            return f"UNKNOWN {level}"
    return str(level)


async def _describe(bootstrap: list[tuple[str, int]], *, timeout_ms: int, security: ClientSecurity | None) -> int:
    async with ControllerAdmin(bootstrap, timeout_ms=timeout_ms, client_id="kraft-features",
                               security=security) as admin:
        try:
            connection = await admin.any_connection()
        except ControllerAdminError as e:
            raise CliError(str(e)) from None
        response = connection.api_versions_response
    finalized = {f.name: int(f.max_version_level) for f in response.finalized_features}
    epoch = int(response.finalized_features_epoch)
    for feature in sorted(response.supported_features, key=lambda f: f.name):
        name = feature.name
        print(
            f"Feature: {name}\tSupportedMinVersion: {level_to_string(name, int(feature.min_version))}"
            f"\tSupportedMaxVersion: {level_to_string(name, int(feature.max_version))}"
            f"\tFinalizedVersionLevel: {level_to_string(name, finalized.get(name, 0))}"
            f"\tEpoch: {epoch if epoch >= 0 else '-'}"
        )
    return 0


def _updates(args: argparse.Namespace) -> dict[str, tuple[int, int]]:
    """feature -> (level, upgrade type), refusing what kafka-features refuses."""
    op = args.command
    if op == "upgrade":
        upgrade_type = _UPGRADE
    else:
        upgrade_type = _UNSAFE_DOWNGRADE if args.unsafe else _SAFE_DOWNGRADE
    updates: dict[str, tuple[int, int]] = {}
    if op == "disable":
        for feature in args.feature or ():
            if feature in updates:
                raise CliError(f"Feature {feature} was specified more than once.")
            updates[feature] = (0, upgrade_type)
    else:
        if args.metadata is not None:
            try:
                version = metadata_version.from_version_string(args.metadata)
            except ValueError:
                supported = ", ".join(
                    str(v) for v in metadata_version.METADATA_VERSIONS
                    if metadata_version.MINIMUM <= v <= metadata_version.LATEST_PRODUCTION
                )
                raise CliError(
                    f"Unsupported metadata version {args.metadata}. Supported metadata versions are {supported}"
                ) from None
            updates[metadata_version.FEATURE_NAME] = (version.feature_level, upgrade_type)
        for text in args.feature or ():
            name, level = _parse_name_and_level(text)
            if name in updates:
                raise CliError(f"Feature {name} was specified more than once.")
            updates[name] = (level, upgrade_type)
    if not updates:
        raise CliError(f"You must specify at least one feature to {op}")
    return updates


def _parse_name_and_level(text: str) -> tuple[str, int]:
    name, equals, level_text = text.partition("=")
    if not equals:
        raise CliError(f"Can't parse feature=level string {text}: equals sign not found.")
    try:
        level = int(level_text.strip())
        if not -(1 << 15) <= level < (1 << 15):
            raise ValueError(level_text)
    except ValueError:
        raise CliError(f"Can't parse feature=level string {text}: unable to parse {level_text.strip()} as a short.") from None
    return name.strip(), level


async def _update(bootstrap: list[tuple[str, int]], *, op: str, updates: dict[str, tuple[int, int]], dry_run: bool,
                  timeout_ms: int, security: ClientSecurity | None) -> int:
    request = UpdateFeaturesRequest(
        feature_updates=tuple(
            FeatureUpdateKey(feature=name, max_version_level=i16(level), upgrade_type=i8(kind))
            for name, (level, kind) in updates.items()
        ),
        validate_only=dry_run,
    )
    async with ControllerAdmin(bootstrap, timeout_ms=timeout_ms, client_id="kraft-features",
                               security=security) as admin:
        try:
            response = await admin.send_to_active(request)
        except ControllerAdminError as e:
            raise CliError(str(e)) from None
    errors: dict[str, tuple[ErrorCode, str | None]] = {}
    top = ErrorCode(response.error_code)
    per_feature = {r.feature: (ErrorCode(r.error_code), r.error_message) for r in response.results}
    for name in updates:
        if top != ErrorCode.none:
            errors[name] = (top, response.error_message)
        else:
            errors[name] = per_feature.get(name, (ErrorCode.none, None))
    failures = 0
    for name in sorted(errors):
        level = updates[name][0]
        code, message = errors[name]
        target = f"disable {name}" if op == "disable" else f"{op} {name} to {level}"
        if code != ErrorCode.none:
            print(f"{'Can not' if dry_run else 'Could not'} {target}. {message or _default_message(code)}")
            failures += 1
        else:
            done = "disabled." if op == "disable" else f"{op}d to {level}."
            print(f"{name}{' can be ' if dry_run else ' was '}{done}")
    if failures:
        raise CliError(f"{failures} out of {len(updates)} operation(s) failed.")
    return 0


def _default_message(code: ErrorCode) -> str:
    return code.name.upper()
