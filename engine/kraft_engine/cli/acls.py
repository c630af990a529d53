"""`kraft acls`: Kafka's kafka-acls tool (AclCommand), against brokers (`--bootstrap-server`) or
the controllers (`--bootstrap-controller`), with `--command-config` for the client's security keys.

Same verbs, flags and output as kafka-acls: `--add` prints "Adding ACLs for resource `...`:" with
one tab-indented entry per ACL, then the resource's current ACLs; `--remove` (asks for
confirmation unless `--force`) removes the entries given, or every ACL of the resource filter when
no principal is given, then lists what is left; `--list` prints "Current ACLs for resource `...`:"
per resource pattern, and with `--principal` only that principal's ACLs. Resources: `--topic`,
`--group`, `--cluster`, `--transactional-id`, `--delegation-token`, `--user-principal`; the
`--producer` and `--consumer` conveniences add the operations kafka-acls adds (producer: WRITE,
DESCRIBE and CREATE on the topics, IDEMPOTENT_WRITE on the cluster with `--idempotent`, WRITE and
DESCRIBE on transactional ids; consumer: READ and DESCRIBE on the topics, READ on the group).
Operations are named as kafka-acls names them (`Read`, `DescribeConfigs`, ...; case-insensitive).
CreateAcls and DeleteAcls go to the active controller (a broker forwards them); DescribeAcls to
any node.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
from kio.schema.delete_acls.v3.request import DeleteAclsFilter, DeleteAclsRequest
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.admin.broker_admin import BrokerAdmin
from kraft_engine.admin.controller_admin import ControllerAdmin, ControllerAdminError
from kraft_engine.cli.main import CliError
from kraft_engine.cli.tool_inputs import COMMAND_CONFIG_HELP, bootstrap_servers, command_config_security
from kraft_engine.metadata.authorizer import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)

__all__ = ["register"]

_CLUSTER_NAME = "kafka-cluster"
_HOST_WILDCARD = "*"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("acls", help="Add, remove or list ACLs (kafka-acls)",
                                   description="This tool helps to manage acls on kafka.")
    bootstrap = parser.add_mutually_exclusive_group(required=True)
    bootstrap.add_argument("--bootstrap-server", help="A list of host/port pairs to use for establishing the "
                           "connection to the Kafka cluster.")
    bootstrap.add_argument("--bootstrap-controller", help="A list of host/port pairs to use for establishing the "
                           "connection to the Kafka controllers.")
    parser.add_argument("--command-config", help=COMMAND_CONFIG_HELP)
    actions = parser.add_mutually_exclusive_group(required=True)
    actions.add_argument("--add", action="store_true", help="Indicates you are trying to add ACLs.")
    actions.add_argument("--remove", action="store_true", help="Indicates you are trying to remove ACLs.")
    actions.add_argument("--list", action="store_true", help="List ACLs for the specified resource.")
    parser.add_argument("--topic", action="append", default=[], help="topic to which ACLs should be added or removed.")
    parser.add_argument("--group", action="append", default=[], help="Consumer Group to which the ACLs should be added or removed.")
    parser.add_argument("--cluster", action="store_true", help="Add/Remove cluster ACLs.")
    parser.add_argument("--transactional-id", action="append", default=[], help="The transactionalId to which ACLs should be added or removed.")
    parser.add_argument("--delegation-token", action="append", default=[], help="Delegation token to which ACLs should be added or removed.")
    parser.add_argument("--user-principal", action="append", default=[], help="Specifies a user principal as a resource in relation with the operation.")
    parser.add_argument("--resource-pattern-type", default=None,
                        help="The type of the resource pattern or pattern filter: LITERAL or PREFIXED for --add; "
                             "also ANY or MATCH for --list and --remove. (default: LITERAL)")
    parser.add_argument("--allow-principal", action="append", default=[], help="principal is in principalType:name format.")
    parser.add_argument("--deny-principal", action="append", default=[], help="principal is in principalType:name format.")
    parser.add_argument("--principal", action="append", default=[], help="List ACLs for the specified principal.")
    parser.add_argument("--allow-host", action="append", default=[], help="Host from which principals listed in --allow-principal will have access.")
    parser.add_argument("--deny-host", action="append", default=[], help="Host from which principals listed in --deny-principal will be denied access.")
    parser.add_argument("--operation", action="append", default=[], help="Operation that is being allowed or denied. (default: All)")
    parser.add_argument("--producer", action="store_true", help="Convenience option to add/remove ACLs for producer role.")
    parser.add_argument("--consumer", action="store_true", help="Convenience option to add/remove ACLs for consumer role.")
    parser.add_argument("--idempotent", action="store_true", help="Enable idempotence for the producer (with --producer).")
    parser.add_argument("--force", action="store_true", help="Assume Yes to all queries and do not prompt.")
    parser.add_argument("--timeout-ms", type=int, default=30000, help=argparse.SUPPRESS)
    parser.set_defaults(func=_run)


# -- Kafka's spellings -----------------------------------------------------------------------------

def _pattern_text(resource_type: ResourceType, name: str | None, pattern_type: PatternType) -> str:
    return f"ResourcePattern(resourceType={resource_type.name}, name={'<any>' if name is None else name}, " \
           f"patternType={pattern_type.name})"


def _entry_text(principal: str, host: str, operation: AclOperation, permission: AclPermissionType) -> str:
    return f"(principal={principal}, host={host}, operation={operation.name}, permissionType={permission.name})"


def _operation(text: str) -> AclOperation:
    # kafka-acls takes Kafka's camel case ("DescribeConfigs"); the enum's names work too.
    compact = text.replace("_", "").replace("-", "").upper()
    for operation in AclOperation:
        if operation.name.replace("_", "") == compact and operation not in (AclOperation.UNKNOWN, AclOperation.ANY):
            return operation
    raise CliError(f"Invalid operation {text}: expected one of "
                   + ", ".join(o.name for o in AclOperation if o not in (AclOperation.UNKNOWN, AclOperation.ANY)))


def _principal(text: str, flag: str) -> str:
    kind, sep, name = text.partition(":")
    if not sep or not kind or not name:
        raise CliError(f"{flag}: {text} is not a principal in principalType:name format")
    return text


# -- what the options mean -------------------------------------------------------------------------

_Resource = tuple[ResourceType, str]


def _resources(args: argparse.Namespace) -> list[_Resource]:
    found: list[_Resource] = [(ResourceType.TOPIC, t) for t in args.topic]
    found += [(ResourceType.GROUP, g) for g in args.group]
    if args.cluster:
        found.append((ResourceType.CLUSTER, _CLUSTER_NAME))
    found += [(ResourceType.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    found += [(ResourceType.DELEGATION_TOKEN, t) for t in args.delegation_token]
    found += [(ResourceType.USER, u) for u in args.user_principal]
    return found


def _pattern_type(args: argparse.Namespace) -> PatternType:
    text = (args.resource_pattern_type or "LITERAL").upper()
    try:
        pattern = PatternType[text]
    except KeyError:
        raise CliError(f"Invalid resource-pattern-type {args.resource_pattern_type}: expected one of "
                       "ANY, MATCH, LITERAL, PREFIXED") from None
    if args.add and pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise CliError(f"A '--resource-pattern-type' value of '{pattern.name}' is not valid when adding acls.")
    return pattern


def _entries(args: argparse.Namespace, operations: list[AclOperation]) -> list[tuple[str, str, AclOperation, AclPermissionType]]:
    entries = []
    for principals, hosts, permission, flag in (
            (args.allow_principal, args.allow_host, AclPermissionType.ALLOW, "--allow-principal"),
            (args.deny_principal, args.deny_host, AclPermissionType.DENY, "--deny-principal")):
        for principal in principals:
            for host in hosts or [_HOST_WILDCARD]:
                for operation in operations:
                    entries.append((_principal(principal, flag), host, operation, permission))
    return entries


def _resource_to_entries(args: argparse.Namespace) -> dict[_Resource, list[tuple[str, str, AclOperation, AclPermissionType]]]:
    """Resource -> the ACL entries the options ask for (kafka-acls' getResourceToAcls)."""
    resources = _resources(args)
    if args.producer or args.consumer:
        if args.producer and not (args.topic or args.transactional_id):
            raise CliError("With --producer you must specify a --topic")
        if args.consumer and (not args.topic or not args.group):
            raise CliError("With --consumer you must specify a --topic and a --group")
        if args.idempotent and not args.producer:
            raise CliError("--idempotent is only valid with --producer")
        wanted: dict[_Resource, list[AclOperation]] = {}
        if args.producer:
            for topic in args.topic:
                wanted.setdefault((ResourceType.TOPIC, topic), []).extend(
                    [AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE])
            for transactional_id in args.transactional_id:
                wanted.setdefault((ResourceType.TRANSACTIONAL_ID, transactional_id), []).extend(
                    [AclOperation.WRITE, AclOperation.DESCRIBE])
            if args.idempotent:
                wanted.setdefault((ResourceType.CLUSTER, _CLUSTER_NAME), []).append(AclOperation.IDEMPOTENT_WRITE)
        if args.consumer:
            for topic in args.topic:
                operations = wanted.setdefault((ResourceType.TOPIC, topic), [])
                operations.extend(o for o in (AclOperation.READ, AclOperation.DESCRIBE) if o not in operations)
            for group in args.group:
                wanted.setdefault((ResourceType.GROUP, group), []).append(AclOperation.READ)
        return {resource: _entries(args, operations) for resource, operations in wanted.items()}
    if not resources:
        raise CliError("You must provide at least one resource: --topic <topic> or --cluster or --group <group> "
                       "or --transactional-id <id> or --delegation-token <token> or --user-principal <principal>")
    operations = [_operation(o) for o in args.operation] or [AclOperation.ALL]
    return {resource: _entries(args, operations) for resource in resources}


# -- running ---------------------------------------------------------------------------------------

def _run(args: argparse.Namespace) -> int:
    if args.bootstrap_server:
        bootstrap = bootstrap_servers(args.bootstrap_server)
    else:
        bootstrap = bootstrap_servers(args.bootstrap_controller, flag="--bootstrap-controller")
    security = command_config_security(args.command_config)
    if args.list and (args.allow_principal or args.deny_principal or args.producer or args.consumer):
        raise CliError("Option --list does not take --allow-principal, --deny-principal, --producer or --consumer")
    if not args.list and args.principal:
        raise CliError("--principal is only valid with --list")
    pattern = _pattern_type(args)
    admin_cls = BrokerAdmin if args.bootstrap_server else ControllerAdmin
    try:
        return asyncio.run(_act(args, admin_cls(bootstrap, timeout_ms=args.timeout_ms, client_id="kraft-acls",
                                                 security=security), pattern=pattern))
    except ControllerAdminError as e:
        raise CliError(f"Error while executing ACL command: {e}") from None


async def _act(args: argparse.Namespace, admin: ControllerAdmin, *, pattern: PatternType) -> int:
    async with admin:
        if args.add:
            await _add(args, admin, pattern=pattern)
        elif args.remove:
            await _remove(args, admin, pattern=pattern)
        await _list(args, admin, pattern=pattern)
    return 0


async def _add(args: argparse.Namespace, admin: ControllerAdmin, *, pattern: PatternType) -> None:
    wanted = _resource_to_entries(args)
    if not any(wanted.values()):
        raise CliError("You must specify one of: --allow-principal, --deny-principal when trying to add ACLs.")
    creations = []
    for (resource_type, name), entries in wanted.items():
        print(f"Adding ACLs for resource `{_pattern_text(resource_type, name, pattern)}`: ")
        print(" " + "\n".join("\t" + _entry_text(*e) for e in entries) + " ")
        print()
        creations += [AclCreation(resource_type=i8(resource_type), resource_name=name, resource_pattern_type=i8(pattern),
                                  principal=p, host=h, operation=i8(o), permission_type=i8(perm))
                      for p, h, o, perm in entries]
    response = await admin.send_to_active(CreateAclsRequest(creations=tuple(creations)))
    failures = [r for r in response.results if r.error_code != ErrorCode.none]
    if failures:
        first = failures[0]
        raise CliError(f"Error while executing ACL command: {ErrorCode(first.error_code).name.upper()}: "
                       f"{first.error_message or ''}".rstrip(": "))


def _confirm(args: argparse.Namespace, question: str) -> bool:
    if args.force:
        return True
    print(question)
    return sys.stdin.readline().strip().lower() == "y"


async def _remove(args: argparse.Namespace, admin: ControllerAdmin, *, pattern: PatternType) -> None:
    if args.allow_principal or args.deny_principal or args.producer or args.consumer:
        wanted = _resource_to_entries(args)
    else:
        wanted = {resource: [] for resource in _resources(args)}
        if not wanted:
            raise CliError("You must provide at least one resource to remove ACLs from.")
    for (resource_type, name), entries in wanted.items():
        described = _pattern_text(resource_type, name, pattern)
        if entries:
            question = ("Are you sure you want to remove ACLs: \n " + "\n".join("\t" + _entry_text(*e) for e in entries)
                        + f" \n from resource filter `{described}`? (y/n)")
        else:
            question = f"Are you sure you want to delete all ACLs for resource filter `{described}`? (y/n)"
        if not _confirm(args, question):
            continue
        filters = [DeleteAclsFilter(resource_type_filter=i8(resource_type), resource_name_filter=name,
                                    pattern_type_filter=i8(pattern), principal_filter=p, host_filter=h,
                                    operation=i8(o), permission_type=i8(perm)) for p, h, o, perm in entries] or [
            DeleteAclsFilter(resource_type_filter=i8(resource_type), resource_name_filter=name,
                             pattern_type_filter=i8(pattern), principal_filter=None, host_filter=None,
                             operation=i8(AclOperation.ANY), permission_type=i8(AclPermissionType.ANY))]
        response = await admin.send_to_active(DeleteAclsRequest(filters=tuple(filters)))
        failures = [r for r in response.filter_results if r.error_code != ErrorCode.none]
        if failures:
            raise CliError(f"Error while executing ACL command: {ErrorCode(failures[0].error_code).name.upper()}: "
                           f"{failures[0].error_message or ''}".rstrip(": "))


async def _describe(admin: ControllerAdmin, acl_filter: AclBindingFilter) -> list[AclBinding]:
    response: Any = await admin.send_to_any(DescribeAclsRequest(
        resource_type_filter=i8(acl_filter.resource_type), resource_name_filter=acl_filter.resource_name,
        pattern_type_filter=i8(acl_filter.pattern_type), principal_filter=acl_filter.principal,
        host_filter=acl_filter.host, operation=i8(acl_filter.operation), permission_type=i8(acl_filter.permission_type)))
    if response.error_code != ErrorCode.none:
        raise CliError(f"Error while executing ACL command: {ErrorCode(response.error_code).name.upper()}: "
                       f"{response.error_message or ''}".rstrip(": "))
    return [AclBinding.of(resource_type=r.resource_type, resource_name=r.resource_name, pattern_type=r.pattern_type,
                          principal=a.principal, host=a.host, operation=a.operation, permission_type=a.permission_type)
            for r in response.resources for a in r.acls]


async def _list(args: argparse.Namespace, admin: ControllerAdmin, *, pattern: PatternType) -> None:
    resources = _resources(args)
    if args.producer or args.consumer:
        resources = list(_resource_to_entries(args))
    # After --add and --remove kafka-acls lists the resources it touched (with the pattern type
    # given, LITERAL by default); --list with no resource lists every ACL.
    filters = [AclBindingFilter(resource_type=t, resource_name=n, pattern_type=pattern) for t, n in resources] or [
        AclBindingFilter()]
    found: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for acl_filter in filters:
        for binding in await _describe(admin, acl_filter):
            bindings = found.setdefault((binding.resource_type, binding.resource_name, binding.pattern_type), [])
            if binding not in bindings:
                bindings.append(binding)
    principals: list[str | None] = [_principal(p, "--principal") for p in args.principal]
    for principal in principals or [None]:
        if principal is not None:
            print(f"ACLs for principal `{principal}`")
        for (resource_type, name, pattern_type), bindings in sorted(found.items()):
            shown = [b for b in bindings if principal is None or b.principal == principal]
            if not shown:
                continue
            print(f"Current ACLs for resource `{_pattern_text(resource_type, name, pattern_type)}`: ")
            print(" " + "\n".join("\t" + _entry_text(b.principal, b.host, b.operation, b.permission_type)
                                  for b in shown) + " ")
            print()
