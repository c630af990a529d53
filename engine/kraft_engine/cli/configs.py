"""`kraft configs`: Kafka's kafka-configs tool (ConfigCommand) for topics, brokers and users' SCRAM
credentials.

An operator's runbooks say `kafka-configs --bootstrap-server ... --entity-type topics
--entity-name orders --alter --add-config retention.ms=86400000` and `kafka-configs ... --alter
--add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]' --entity-type users
--entity-name alice`; this tool takes the same flags and prints the same lines, against our nodes
and Apache Kafka's:

- `--describe` of topics and brokers is DescribeConfigs with synonyms, filtered as Kafka's tool
  filters it: the dynamic configs of the entity (`Dynamic configs for topic orders are:`), every
  config with `--all`, the cluster-wide dynamic defaults with `--entity-default` /
  `--broker-defaults`; one line per config, `  name=value sensitive=false synonyms={SOURCE:name=value, ...}`.
  Without a name every topic, or every broker and then the defaults, is described.
- `--alter` of topics and brokers is IncrementalAlterConfigs (SET for `--add-config` /
  `--add-config-file`, DELETE for `--delete-config`, which must name a config the entity has:
  `Invalid config(s): ...`), then `Completed updating config for topic orders.`.
- Users: `--alter` with `SCRAM-SHA-256=[...]` / `SCRAM-SHA-512=[iterations=N,password=...]`
  is AlterUserScramCredentials (the salted password computed here, as Kafka's admin client does:
  the password never leaves the tool), `--delete-config SCRAM-SHA-512` removes one;
  `--describe` prints the user's client quotas (DescribeClientQuotas, as Kafka's tool asks first)
  and `SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192`.

Refusals of the arguments are Kafka's messages (exit 1). Client quotas (users' and clients'
quota keys, ips), broker loggers, client-metrics and groups are not served here: such an entity
type is refused by name.

`--bootstrap-server` sends a broker's describe to that broker (its own view, as Kafka's admin
client does) and everything else to any broker (brokers forward alterations to the controller);
`--bootstrap-controller` sends everything to the active controller. `--command-config` takes
Kafka's client security keys.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kio.schema.alter_user_scram_credentials.v0.request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.describe_configs.v4.request import DescribeConfigsRequest, DescribeConfigsResource
from kio.schema.describe_user_scram_credentials.v0.request import (
    DescribeUserScramCredentialsRequest,
    UserName,
)
from kio.schema.errors import ErrorCode
from kio.schema.incremental_alter_configs.v1.request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from kio.schema.metadata.v12.request import MetadataRequest
from kio.static.primitive import i8

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramMechanism
from kraft_engine.protocol.security import ClientSecurity
from kraft_engine.storage.java_properties import JavaPropertiesError, parse_properties

__all__ = ["ConfigsArgumentError", "parse_add_config", "register"]

_TOPICS, _BROKERS, _USERS = "topics", "brokers", "users"
_KAFKA_TYPES = ("topics", "clients", "users", "brokers", "ips", "broker-loggers", "client-metrics", "groups")
_SERVED_TYPES = (_TOPICS, _BROKERS, _USERS)
_TOPIC_RESOURCE, _BROKER_RESOURCE = 2, 4
_SET, _DELETE = 0, 1
_DEFAULT_ITERATIONS = 4096
_SOURCES = {0: "UNKNOWN", 1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG", 3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
            4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG", 6: "DYNAMIC_BROKER_LOGGER_CONFIG",
            7: "CLIENT_METRICS_CONFIG", 8: "GROUP_CONFIG"}
# The source a plain --describe shows (Kafka's dynamicConfigSource), per resource.
_DYNAMIC_TOPIC, _DYNAMIC_BROKER, _DYNAMIC_DEFAULT = 1, 2, 3
# Kafka splits --add-config on commas outside square brackets, and each pair on its first '='
# outside them (values such as `[v1,v2]` keep their commas; the brackets are then dropped).
_OUTSIDE_BRACKETS = r"(?=[^\]]*(?:\[|$))"
_SCRAM_VALUE = re.compile(r"(?:iterations=(-?[0-9]*),)?password=(.*)", re.DOTALL)
_KEY = re.compile(r"[a-zA-Z0-9._-]*")
_EXCEPTIONS = {
    ErrorCode.topic_authorization_failed: "org.apache.kafka.common.errors.TopicAuthorizationException",
    ErrorCode.cluster_authorization_failed: "org.apache.kafka.common.errors.ClusterAuthorizationException",
    ErrorCode.unknown_topic_or_partition: "org.apache.kafka.common.errors.UnknownTopicOrPartitionException",
    ErrorCode.invalid_config: "org.apache.kafka.common.errors.InvalidConfigurationException",
    ErrorCode.invalid_request: "org.apache.kafka.common.errors.InvalidRequestException",
    ErrorCode.unacceptable_credential: "org.apache.kafka.common.errors.UnacceptableCredentialException",
    ErrorCode.resource_not_found: "org.apache.kafka.common.errors.ResourceNotFoundException",
    ErrorCode.duplicate_resource: "org.apache.kafka.common.errors.DuplicateResourceException",
    ErrorCode.unsupported_version: "org.apache.kafka.common.errors.UnsupportedVersionException",
}


class ConfigsArgumentError(CliError):
    """An argument Kafka's ConfigCommand refuses; printed as Kafka prints it (the message alone)."""


class _ExecutionFailed(CliError):
    """A refusal from the cluster: Kafka's tool prints the command line, then the exception."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "configs", help="Describe and alter configs of topics, brokers and users' SCRAM credentials (kafka-configs)",
        description="This tool helps to manipulate and describe entity config for a topic, client, user, broker, "
                    "ip, client-metrics or group")
    parser.add_argument("--bootstrap-server", help="The Kafka servers to connect to.")
    parser.add_argument("--bootstrap-controller", help="The Kafka controllers to connect to.")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    parser.add_argument("--alter", action="store_true", help="Alter the configuration for the entity.")
    parser.add_argument("--describe", action="store_true", help="List configs for the given entity.")
    parser.add_argument("--all", action="store_true",
                        help="List all configs for the given entity, including static configs if available.")
    parser.add_argument("--entity-type", action="append", default=[],
                        help="Type of entity (topics/clients/users/brokers/broker-loggers/ips/client-metrics/groups)")
    parser.add_argument("--entity-name", action="append", default=[],
                        help="Name of entity (topic name/client id/user principal name/broker id/ip/client metrics/"
                             "group id)")
    parser.add_argument("--entity-default", action="store_true",
                        help="Default entity name for clients/users/brokers/ips (applies to corresponding entity type)")
    parser.add_argument("--add-config", help="Key Value pairs of configs to add. Square brackets can be used to group "
                                             "values which contain commas: 'k1=v1,k2=[v1,v2,v2],k3=v3'.")
    parser.add_argument("--add-config-file", help="Path to a properties file with configs to add.")
    parser.add_argument("--delete-config", action="append", default=[], help="config keys to remove 'k1,k2'")
    parser.add_argument("--force", action="store_true", help="Suppress console prompts")
    parser.add_argument("--topic", help="The topic's name.")
    parser.add_argument("--user", help="The user's principal name.")
    parser.add_argument("--broker", help="The broker's ID.")
    parser.add_argument("--broker-defaults", action="store_true", help="The config defaults for all brokers.")
    parser.add_argument("--timeout-ms", type=int, default=30000, help="How long to retry (default 30000).")
    parser.set_defaults(func=_run)


@dataclass(frozen=True)
class _Command:
    entity_type: str
    entity_name: str | None  # None: every entity; "": the default entity
    describe: bool
    describe_all: bool
    to_add: dict[str, str]
    to_delete: list[str]


def _run(args: argparse.Namespace) -> int:
    try:
        command = _command(args)
    except ConfigsArgumentError as refusal:
        print(str(refusal), file=sys.stderr)
        return 1
    admin_cls: type[ControllerAdmin]
    if args.bootstrap_server is not None:
        bootstrap, admin_cls = bootstrap_servers(args.bootstrap_server), BrokerAdmin
    else:
        bootstrap = bootstrap_servers(args.bootstrap_controller, flag="--bootstrap-controller")
        admin_cls = ControllerAdmin
    security = command_config_security(args.command_config)
    try:
        return asyncio.run(_execute(command, bootstrap, admin_cls=admin_cls, by_broker=admin_cls is BrokerAdmin,
                                    timeout_ms=args.timeout_ms, security=security))
    except ConfigsArgumentError as refusal:
        print(str(refusal), file=sys.stderr)
        return 1
    except (_ExecutionFailed, ControllerAdminError) as failure:
        print(f"Error while executing config command with args '{' '.join(args.tool_arguments)}'", file=sys.stderr)
        print(str(failure), file=sys.stderr)
        return 1


def _command(args: argparse.Namespace) -> _Command:
    """Kafka's ConfigCommandOptions.checkArgs, for the entity types served here."""
    if int(args.alter) + int(args.describe) != 1:
        raise ConfigsArgumentError("Command must include exactly one action: --describe, --alter")
    if args.describe and (args.add_config or args.add_config_file or args.delete_config):
        raise ConfigsArgumentError("Option \"[describe]\" can't be used with option \"[alter, add-config, "
                                   "delete-config]\"")
    flags = [(_TOPICS, args.topic), (_USERS, args.user), (_BROKERS, args.broker)]
    flag_types = [t for t, value in flags if value is not None] + ([_BROKERS] if args.broker_defaults else [])
    flag_names = [value for _, value in flags if value is not None] + ([""] if args.broker_defaults else [])
    if (args.entity_type or args.entity_name or args.entity_default) and flag_types:
        raise ConfigsArgumentError("--entity-{type,name,default} should not be used in conjunction with specific "
                                   "entity flags")
    types = list(args.entity_type) + flag_types
    # Kafka pairs --entity-name / --entity-default in command-line order; one entity here.
    names = list(args.entity_name) + ([""] if args.entity_default else []) + flag_names
    duplicates = sorted({t for t in types if types.count(t) > 1})
    if duplicates:
        raise ConfigsArgumentError(f"Duplicate entity type(s) specified: {','.join(duplicates)}")
    for entity_type in types:
        if entity_type not in _KAFKA_TYPES:
            raise ConfigsArgumentError(f"Invalid entity type {entity_type}, the entity type must be one of "
                                       f"{', '.join(_KAFKA_TYPES)} with a --bootstrap-server or "
                                       "--bootstrap-controller argument")
    if not types:
        raise ConfigsArgumentError("At least one entity type must be specified")
    if len(types) > 1:
        if set(types) == {_USERS, "clients"}:
            raise ConfigsArgumentError("kraft configs does not serve client quotas (users with clients)")
        raise ConfigsArgumentError("Only 'users' and 'clients' entity types may be specified together")
    (entity_type,) = types
    if entity_type not in _SERVED_TYPES:
        raise ConfigsArgumentError(f"kraft configs serves the entity types {', '.join(_SERVED_TYPES)}; "
                                   f"{entity_type} is not served")
    if (args.bootstrap_server is None) == (args.bootstrap_controller is None):
        if args.bootstrap_server is None:
            raise ConfigsArgumentError("One of the required --bootstrap-server or --bootstrap-controller arguments "
                                       "must be specified")
        raise ConfigsArgumentError("Only one of --bootstrap-server or --bootstrap-controller can be specified")
    if len(names) > 1:
        raise ConfigsArgumentError("More entity names specified than entity types")
    name = names[0] if names else None
    if entity_type == _BROKERS and name:
        try:
            int(name)
        except ValueError:
            raise ConfigsArgumentError(f"The entity name for {entity_type} must be a valid integer broker id, but it "
                                       f"is: {name}") from None
    if args.describe and name == "" and entity_type == _TOPICS:
        raise ConfigsArgumentError(f"--entity-default must not be specified with --describe of {entity_type}")
    to_add: dict[str, str] = {}
    to_delete: list[str] = []
    if args.alter:
        if entity_type == _TOPICS and not name:
            raise ConfigsArgumentError(f"An entity name must be specified with --alter of {entity_type}")
        if name is None:
            raise ConfigsArgumentError("An entity-name or default entity must be specified with --alter of users, "
                                       "clients, brokers or ips")
        if args.add_config and args.add_config_file:
            raise ConfigsArgumentError("Only one of --add-config or --add-config-file must be specified")
        if not (args.add_config or args.add_config_file or args.delete_config):
            raise ConfigsArgumentError("At least one of --add-config, --add-config-file, or --delete-config must be "
                                       "specified with --alter")
        to_add = _configs_to_add(args)
        to_delete = [key.strip() for text in args.delete_config for key in text.split(",") if key.strip()]
        if entity_type == _USERS:
            _check_user_configs(to_add, to_delete, name=name)
    return _Command(entity_type=entity_type, entity_name=name, describe=args.describe, describe_all=args.all,
                    to_add=to_add, to_delete=to_delete)


def parse_add_config(text: str) -> dict[str, str]:
    """`--add-config` as Kafka parses it: `k1=v1,k2=[v1,v2],k3=` (brackets group commas and are dropped)."""
    configs: dict[str, str] = {}
    for pair in re.split("," + _OUTSIDE_BRACKETS, text):
        parts = re.split(r"\s*=\s*" + _OUTSIDE_BRACKETS, pair)
        if len(parts) != 2:
            raise ConfigsArgumentError('Invalid entity config: all configs to be added must be in the format "key=val".')
        configs[parts[0].strip()] = re.sub(r"\[?\]?", "", parts[1]).strip()
    return configs


def _configs_to_add(args: argparse.Namespace) -> dict[str, str]:
    configs: dict[str, str] = {}
    if args.add_config_file:
        try:
            configs.update(parse_properties(Path(args.add_config_file).read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, JavaPropertiesError) as e:
            raise ConfigsArgumentError(f"cannot read --add-config-file {args.add_config_file}: {e}") from None
    if args.add_config:
        configs.update(parse_add_config(args.add_config))
    for key in configs:
        if not _KEY.fullmatch(key):
            raise ConfigsArgumentError(f"Invalid character found for config key: {key}")
    return configs


def _check_user_configs(to_add: dict[str, str], to_delete: list[str], *, name: str) -> None:
    unknown_added = [k for k in to_add if k not in SCRAM_MECHANISMS]
    unknown_deleted = [k for k in to_delete if k not in SCRAM_MECHANISMS]
    if unknown_added:
        raise ConfigsArgumentError("Only quota and SCRAM credential configs can be added for 'users' using "
                                   f"--bootstrap-server. Unexpected config names: {_scala_list(unknown_added)} "
                                   "(kraft configs serves SCRAM credentials only)")
    if unknown_deleted:
        raise ConfigsArgumentError("Only quota and SCRAM credential configs can be deleted for 'users' using "
                                   f"--bootstrap-server. Unexpected config names: {_scala_list(unknown_deleted)} "
                                   "(kraft configs serves SCRAM credentials only)")
    if not name:
        raise ConfigsArgumentError("The use of --entity-default or --user-defaults is not allowed with User SCRAM "
                                   "Credentials using --bootstrap-server.")


def _scala_list(items: list[str]) -> str:
    return f"List({', '.join(items)})"


def _scram_upsertion(user: str, mechanism: ScramMechanism, text: str) -> ScramCredentialUpsertion:
    """Kafka's iterationsAndPasswordBytes, then the salted password its admin client sends."""
    import hashlib

    from kio.static.primitive import i32

    match = _SCRAM_VALUE.fullmatch(text)
    if match is None:
        raise ConfigsArgumentError(f"Invalid credential property {mechanism.name}={text}")
    given, password = match.group(1), match.group(2)
    try:
        iterations = int(given) if given and given != "-1" else _DEFAULT_ITERATIONS
    except ValueError:
        raise ConfigsArgumentError(f"Invalid credential property {mechanism.name}={text}") from None
    if iterations < mechanism.min_iterations:
        raise ConfigsArgumentError(f"Iterations {iterations} is less than the minimum {mechanism.min_iterations} "
                                   f"required for {mechanism.name}")
    salt = os.urandom(32)
    salted = hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)
    return ScramCredentialUpsertion(name=user, mechanism=i8(mechanism.mechanism_id), iterations=i32(iterations),
                                    salt=salt, salted_password=salted)


# -- against the cluster ----------------------------------------------------------------------------

async def _execute(command: _Command, bootstrap: list[tuple[str, int]], *, admin_cls: type[ControllerAdmin],
                   by_broker: bool, timeout_ms: int, security: ClientSecurity | None) -> int:
    async with admin_cls(bootstrap, timeout_ms=timeout_ms, client_id="configs-tool", security=security) as admin:
        session = _Session(admin, by_broker=by_broker)
        if command.entity_type == _USERS:
            if command.describe:
                await session.describe_users(command.entity_name)
            else:
                await session.alter_user(str(command.entity_name), command.to_add, command.to_delete)
        elif command.describe:
            await session.describe_resources(command)
        else:
            await session.alter_resource(command)
    if not command.describe:
        if command.entity_name:
            print(f"Completed updating config for {command.entity_type[:-1]} {command.entity_name}.")
        else:
            print(f"Completed updating default config for {command.entity_type} in the cluster.")
    return 0


def _failure(code: ErrorCode, message: str | None) -> _ExecutionFailed:
    exception = _EXCEPTIONS.get(code, f"org.apache.kafka.common.errors.{code.name.upper()}")
    return _ExecutionFailed(f"java.util.concurrent.ExecutionException: {exception}: {message or code.name.upper()}")


class _Session:
    def __init__(self, admin: ControllerAdmin, *, by_broker: bool) -> None:
        self._admin = admin
        self._by_broker = by_broker

    async def _send(self, request: Any) -> Any:
        return await (self._admin.send_to_any(request) if self._by_broker else self._admin.send_to_active(request))

    async def _brokers(self) -> dict[int, tuple[str, int]]:
        metadata = await self._admin.send_to_any(MetadataRequest(topics=(), allow_auto_topic_creation=False,
                                                                 include_topic_authorized_operations=False))
        return {int(b.node_id): (b.host, int(b.port)) for b in metadata.brokers}

    async def _describe(self, resource_type: int, name: str, *, synonyms: bool) -> list[Any]:
        request = DescribeConfigsRequest(
            resources=(DescribeConfigsResource(resource_type=i8(resource_type), resource_name=name,
                                               configuration_keys=None),),
            include_synonyms=synonyms, include_documentation=False)
        response = None
        if self._by_broker and resource_type == _BROKER_RESOURCE and name:
            # Kafka's admin client asks a broker about itself: its own view of its configs.
            address = (await self._brokers()).get(int(name))
            if address is not None and isinstance(self._admin, BrokerAdmin):
                response = await self._admin.send_to(address, request)
        if response is None:
            response = await self._send(request)
        (result,) = response.results
        code = ErrorCode(result.error_code)
        if code != ErrorCode.none:
            raise _failure(code, result.error_message)
        return sorted(result.configs, key=lambda c: str(c.name))

    async def describe_resources(self, command: _Command) -> None:
        resource_type = _TOPIC_RESOURCE if command.entity_type == _TOPICS else _BROKER_RESOURCE
        if command.entity_name is not None:
            names = [command.entity_name]
        elif command.entity_type == _TOPICS:
            metadata = await self._send(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                        include_topic_authorized_operations=False))
            names = sorted(str(t.name) for t in metadata.topics if int(t.error_code) == 0)
        else:
            names = [str(b) for b in sorted(await self._brokers())] + [""]
        for name in names:
            if resource_type == _TOPIC_RESOURCE:
                shown = None if command.describe_all else _DYNAMIC_TOPIC
            else:
                shown = _DYNAMIC_DEFAULT if name == "" else None if command.describe_all else _DYNAMIC_BROKER
            if name == "":
                print(f"Default configs for {command.entity_type} in the cluster are:")
            else:
                print(f"{'All' if command.describe_all else 'Dynamic'} configs for {command.entity_type[:-1]} {name} are:")
            for entry in await self._describe(resource_type, name, synonyms=True):
                if shown is not None and int(entry.config_source) != shown:
                    continue
                chain = ", ".join(f"{_SOURCES.get(int(s.source), 'UNKNOWN')}:{s.name}={_java(s.value)}"
                                  for s in entry.synonyms)
                print(f"  {entry.name}={_java(entry.value)} sensitive={str(bool(entry.is_sensitive)).lower()} "
                      f"synonyms={{{chain}}}")

    async def alter_resource(self, command: _Command) -> None:
        resource_type = _TOPIC_RESOURCE if command.entity_type == _TOPICS else _BROKER_RESOURCE
        name = str(command.entity_name)
        dynamic = _DYNAMIC_TOPIC if resource_type == _TOPIC_RESOURCE else (
            _DYNAMIC_DEFAULT if name == "" else _DYNAMIC_BROKER)
        present = {str(e.name) for e in await self._describe(resource_type, name, synonyms=False)
                   if int(e.config_source) == dynamic}
        missing = [key for key in command.to_delete if key not in present]
        if missing:
            raise ConfigsArgumentError(f"Invalid config(s): {','.join(missing)}")
        operations = tuple(AlterableConfig(name=k, config_operation=i8(_SET), value=v) for k, v in command.to_add.items())
        operations += tuple(AlterableConfig(name=k, config_operation=i8(_DELETE), value="") for k in command.to_delete)
        response = await self._send(IncrementalAlterConfigsRequest(
            resources=(AlterConfigsResource(resource_type=i8(resource_type), resource_name=name, configs=operations),),
            validate_only=False))
        (result,) = response.responses
        code = ErrorCode(result.error_code)
        if code != ErrorCode.none:
            raise _failure(code, result.error_message)

    async def describe_users(self, name: str | None) -> None:
        """Kafka's describeClientQuotaAndUserScramCredentialConfigs: the user's quotas (a named
        user's, or every user's), then a named user's SCRAM credentials."""
        component = ComponentData(entity_type="user", match_type=i8(2 if name is None else 0), match=name)
        quotas = await self._send(DescribeClientQuotasRequest(components=(component,), strict=True))
        code = ErrorCode(quotas.error_code)
        if code != ErrorCode.none:
            raise _failure(code, quotas.error_message)
        for entry in quotas.entries or ():
            names = {str(e.entity_type): e.entity_name for e in entry.entity}
            entity = ", ".join(
                f"{label} '{names[key]}'" if names[key] is not None else f"the default {label}"
                for key, label in (("user", "user-principal"), ("client-id", "client-id"), ("ip", "ip"))
                if key in names)
            values = ", ".join(f"{v.key}={_java_double(float(v.value))}" for v in entry.values)
            print(f"Quota configs for {entity} are {values}")
        # Without a name Kafka's tool sends an empty list, which describes no user's credentials
        # (only the quotas above): kafka-configs 4.1 prints nothing more, and neither does this.
        users = () if name is None else (UserName(name=name),)
        response = await self._send(DescribeUserScramCredentialsRequest(users=users))
        code = ErrorCode(response.error_code)
        if code != ErrorCode.none:
            raise _failure(code, response.error_message)
        for result in response.results:
            result_code = ErrorCode(result.error_code)
            if result_code == ErrorCode.resource_not_found:
                continue  # Kafka's result lists only the users that have credentials
            if result_code != ErrorCode.none:
                exception = _EXCEPTIONS.get(result_code, result_code.name.upper())
                print(f"Error retrieving SCRAM credential configs for user-principal '{result.user}': "
                      f"ExecutionException: {exception}: {result.error_message}")
                continue
            mechanisms = {m.mechanism_id: m.name for m in SCRAM_MECHANISMS.values()}
            text = ", ".join(f"{mechanisms.get(int(info.mechanism), 'UNKNOWN')}=iterations={int(info.iterations)}"
                             for info in result.credential_infos)
            print(f"SCRAM credential configs for user-principal '{result.user}' are {text}")

    async def alter_user(self, user: str, to_add: dict[str, str], to_delete: list[str]) -> None:
        deletions = tuple(ScramCredentialDeletion(name=user, mechanism=i8(SCRAM_MECHANISMS[m].mechanism_id))
                          for m in to_delete)
        upsertions = tuple(_scram_upsertion(user, SCRAM_MECHANISMS[m], v) for m, v in to_add.items())
        response = await self._send(AlterUserScramCredentialsRequest(deletions=deletions, upsertions=upsertions))
        for result in response.results:
            code = ErrorCode(result.error_code)
            if code != ErrorCode.none:
                raise _failure(code, result.error_message)


def _java_double(value: float) -> str:
    """A double as Java's Double.toString prints it (1024.0, 1.5E7, 1.0E-4)."""
    if value != 0 and not 1e-3 <= abs(value) < 1e7:
        mantissa, exponent = f"{value:.17e}".split("e")
        digits = repr(float(mantissa)).rstrip("0").rstrip(".")
        digits = digits if "." in digits else f"{digits}.0"
        return f"{digits}E{int(exponent)}"
    return repr(value)


def _java(value: object) -> str:
    """A value as Java's string concatenation prints it (null for a sensitive or unset one)."""
    return "null" if value is None else str(value)
