"""DescribeClientQuotas v0-1, answered by a broker from its metadata image (Kafka's
ClientQuotasImage.describe).

Kafka's `kafka-configs --describe --entity-type users` asks it before it describes SCRAM
credentials, and stops with UnsupportedVersionException on a broker that does not serve it; so
a broker answers from the quotas its image holds (ClientQuotaRecords), whatever wrote them:

- each filter component names an entity type (`user`, `client-id` or `ip`, once each) and matches
  an exact name (0), the default entity (1, no name) or any entity that has the type (2, no name);
  anything else is INVALID_REQUEST (or UNSUPPORTED_VERSION for an unknown type or match type), and
  an `ip` component cannot be combined with a `user` or `client-id` one;
- an entity matches when it has every exact pair and every type asked; `strict` also wants no
  other type in it;
- DESCRIBE_CONFIGS on the cluster is required (CLUSTER_AUTHORIZATION_FAILED otherwise).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import f64

from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.authorizer import AclOperation
from kraft_engine.metadata.client_quotas_image import ClientQuotaEntity
from kraft_engine.protocol import RequestContext
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.config_describing import RequestRefused

__all__ = ["DESCRIBE_CLIENT_QUOTAS", "describe_client_quotas"]

DESCRIBE_CLIENT_QUOTAS = 48
_TYPES = ("user", "client-id", "ip")
_EXACT, _DEFAULT, _SPECIFIED = 0, 1, 2


def describe_client_quotas(request: Any, ctx: RequestContext, *, image: MetadataImage,
                           authorizer: NodeAuthorizer) -> Any:
    def answer(code: ErrorCode, message: str | None, entries: tuple[Any, ...] | None) -> Any:
        return ctx.response_class(throttle_time=timedelta(0), error_code=code, error_message=message, entries=entries)

    if not authorizer.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return answer(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.", None)
    try:
        exact, types = _filter(request.components)
    except RequestRefused as refusal:
        return answer(refusal.error, refusal.message, None)
    module = ctx.response_schema
    entries = tuple(
        module.EntryData(entity=tuple(module.EntityData(entity_type=t, entity_name=n) for t, n in entity),
                         values=tuple(module.ValueData(key=k, value=f64(v)) for k, v in sorted(quotas.items())))
        for entity, quotas in sorted(image.client_quotas.entities.items(), key=lambda item: repr(item[0]))
        if _matches(entity, exact, types, strict=bool(request.strict))
    )
    return answer(ErrorCode.none, None, entries)


def _filter(components: Any) -> tuple[dict[str, str | None], set[str]]:
    exact: dict[str, str | None] = {}
    types: set[str] = set()
    for component in components:
        entity_type, match = str(component.entity_type), component.match
        if not entity_type:
            raise RequestRefused(ErrorCode.invalid_request, "Invalid empty entity type.")
        if entity_type in exact or entity_type in types:
            raise RequestRefused(ErrorCode.invalid_request,
                           f"Entity type {entity_type} cannot appear more than once in the filter.")
        if entity_type not in _TYPES:
            raise RequestRefused(ErrorCode.unsupported_version, f"Unsupported entity type {entity_type}")
        match_type = int(component.match_type)
        if match_type == _EXACT:
            if match is None:
                raise RequestRefused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_EXACT, but set match string to null.")
            exact[entity_type] = str(match)
        elif match_type == _DEFAULT:
            if match is not None:
                raise RequestRefused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.")
            exact[entity_type] = None
        elif match_type == _SPECIFIED:
            if match is not None:
                raise RequestRefused(ErrorCode.invalid_request,
                               "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.")
            types.add(entity_type)
        else:
            raise RequestRefused(ErrorCode.unsupported_version, f"Unknown match type {match_type}")
    named = set(exact) | types
    if "ip" in named and named & {"user", "client-id"}:
        raise RequestRefused(ErrorCode.invalid_request, "Invalid entity filter component combination. IP filter component "
                                                  "should not be used with user or clientId filter component.")
    return exact, types


def _matches(entity: ClientQuotaEntity, exact: dict[str, str | None], types: set[str], *, strict: bool) -> bool:
    pairs = dict(entity)
    if strict and len(pairs) != len(exact) + len(types):
        return False
    return all(t in pairs and pairs[t] == n for t, n in exact.items()) and all(t in pairs for t in types)
