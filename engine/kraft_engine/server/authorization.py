"""A node's authorizer: the ACLs of its metadata image applied to the requests it serves.

Kafka turns authorization on with `authorizer.class.name` (StandardAuthorizer on a KRaft node) and
then checks, in every API, the operation that API needs on the resources it touches. The decisions
are `metadata.authorizer`'s (pure); this module binds them to a node: the principal and the host
come from the request (the client's address for a forwarded request), the ACLs from the node's
current metadata image (brokers: their loader's; controllers: their committed image), rebuilt only
when the image's ACLs change. A denial is logged as Kafka's `kafka.authorizer.logger` does (INFO).

Without `authorizer.class.name` every request is allowed, as in Kafka.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.metadata.authorizer import (
    STANDARD_AUTHORIZER,
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    Authorizer,
    AuthorizerConfig,
    ResourceType,
    operations_bitfield,
)
from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.metadata.security_images import AclsImage
from kraft_engine.protocol import RequestContext
from kraft_engine.server.startup_checks import StartupError

__all__ = ["CLUSTER_NAME", "NodeAuthorizer", "describe_acls"]

logger = logging.getLogger("kafka.authorizer.logger")

CLUSTER_NAME = "kafka-cluster"
# Kafka 3.x's ZooKeeper-era class name still names the same semantics in many server.properties.
_ACCEPTED = {STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer"}
_RESOURCE_LABELS = {ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
                    ResourceType.TRANSACTIONAL_ID: "TransactionalId", ResourceType.DELEGATION_TOKEN: "DelegationToken",
                    ResourceType.USER: "User"}


class NodeAuthorizer:
    def __init__(self, properties: Mapping[str, str], *, image: Callable[[], MetadataImage]) -> None:
        name = properties.get("authorizer.class.name", "").strip()
        if name and name not in _ACCEPTED:
            raise StartupError(f"authorizer.class.name={name} is not served; use {STANDARD_AUTHORIZER}")
        self.enabled = bool(name)
        self._config = AuthorizerConfig.from_properties(properties)
        self._image = image
        self._built: tuple[AclsImage, Authorizer] | None = None

    def current(self) -> Authorizer:
        acls = self._image().acls
        built = self._built
        if built is None or built[0] is not acls:
            built = self._built = (acls, Authorizer.from_records(acls.acls.values(), self._config))
        return built[1]

    def authorize(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                  name: str, *, log_denied: bool = True) -> bool:
        if not self.enabled:
            return True
        host = _host(ctx)
        allowed = self.current().authorize(principal=ctx.principal, host=host, operation=operation,
                                           resource_type=resource_type, resource_name=name)
        if not allowed and log_denied:
            logger.info("Principal = %s is Denied operation = %s from host = %s on resource = %s:LITERAL:%s "
                        "for request = api key %d with resourceRefCount = 1", ctx.principal, operation.name, host,
                        _RESOURCE_LABELS.get(resource_type, resource_type.name), name, ctx.api_key)
        return allowed

    def authorize_cluster(self, ctx: RequestContext, operation: AclOperation, *, log_denied: bool = True) -> bool:
        return self.authorize(ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME, log_denied=log_denied)

    def authorize_by_resource_type(self, ctx: RequestContext, operation: AclOperation,
                                   resource_type: ResourceType) -> bool:
        if not self.enabled:
            return True
        return self.current().authorize_by_resource_type(principal=ctx.principal, host=_host(ctx),
                                                         operation=operation, resource_type=resource_type)

    def authorized_operations(self, ctx: RequestContext, resource_type: ResourceType, name: str) -> int:
        """Kafka's AuthHelper.authorizedOperations: the bitfield of the operations supported on the
        resource type that the request's principal may do on this resource (all of them without an
        authorizer). Denials here are not logged, as Kafka asks these without logging."""
        supported = SUPPORTED_OPERATIONS[resource_type]
        if not self.enabled:
            return operations_bitfield(supported)
        decisions = self.current()
        host = _host(ctx)
        return operations_bitfield(
            operation for operation in supported
            if decisions.authorize(principal=ctx.principal, host=host, operation=operation,
                                   resource_type=resource_type, resource_name=name))

    def allowed(self, ctx: RequestContext, operation: AclOperation, resource_type: ResourceType,
                names: Iterable[str]) -> set[str]:
        """The names among `names` the request may do `operation` on."""
        return {name for name in names if self.authorize(ctx, operation, resource_type, name)}


def _host(ctx: RequestContext) -> str:
    return ctx.client_address or ctx.peer[0]


def describe_acls(request: Any, ctx: RequestContext, *, authorizer: NodeAuthorizer, image: MetadataImage) -> Any:
    """DescribeAcls v1-3 from the image's ACLs, grouped by resource pattern as Kafka answers it
    (CLUSTER_AUTHORIZATION_FAILED without DESCRIBE on the cluster; SECURITY_DISABLED when the
    node has no authorizer; INVALID_REQUEST for a filter with an UNKNOWN element)."""
    cls = ctx.response_class

    def refuse(code: ErrorCode, message: str) -> Any:
        return cls(throttle_time=timedelta(0), error_code=code, error_message=message, resources=())

    if not authorizer.enabled:
        return refuse(ErrorCode.security_disabled, "No Authorizer is configured.")
    if not authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE):
        return refuse(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    acl_filter = AclBindingFilter.of(
        resource_type=request.resource_type_filter, resource_name=request.resource_name_filter,
        pattern_type=request.pattern_type_filter, principal=request.principal_filter, host=request.host_filter,
        operation=request.operation, permission_type=request.permission_type)
    problem = acl_filter.unknown_element()
    if problem is not None:
        return refuse(ErrorCode.invalid_request, problem)
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    bindings = sorted((AclBinding.from_record(r) for r in image.acls.acls.values()), key=AclBinding.sort_key)
    for binding in bindings:
        if acl_filter.matches(binding):
            key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
            grouped.setdefault(key, []).append(binding)
    module = ctx.response_schema
    resources = tuple(
        module.DescribeAclsResource(
            resource_type=i8(resource_type), resource_name=name, pattern_type=i8(pattern_type),
            acls=tuple(module.AclDescription(principal=b.principal, host=b.host, operation=i8(b.operation),
                                             permission_type=i8(b.permission_type)) for b in acls))
        for (resource_type, name, pattern_type), acls in grouped.items()
    )
    return cls(throttle_time=timedelta(0), error_code=ErrorCode.none, error_message=None, resources=resources)
