"""DescribeClientQuotas from a broker's image: Kafka's filter rules (exact, default and
specified components, strict), its refusals, and DESCRIBE_CONFIGS on the cluster."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from kio.schema.describe_client_quotas.v1.request import ComponentData, DescribeClientQuotasRequest
from kio.schema.errors import ErrorCode
from kio.static.primitive import i8

from kraft_engine.metadata import MetadataImage
from kraft_engine.metadata.authorizer import STANDARD_AUTHORIZER
from kraft_engine.metadata.client_quotas_image import ClientQuotasImage
from kraft_engine.protocol import RequestContext
from kraft_engine.server.authorization import NodeAuthorizer
from kraft_engine.server.quota_describing import describe_client_quotas

_IMAGE = dataclasses.replace(MetadataImage.EMPTY, client_quotas=ClientQuotasImage({
    (("user", "alice"),): {"consumer_byte_rate": 1024.0},
    (("user", None),): {"producer_byte_rate": 2048.0},
    (("client-id", "app"), ("user", "alice")): {"request_percentage": 50.0},
    (("ip", "10.0.0.1"),): {"connection_creation_rate": 5.0},
}))
_CTX = RequestContext(api_key=48, api_version=1, correlation_id=0, client_id=None, peer=("", 0), listener_name="")


def _describe(*components: tuple[str, int, str | None], strict: bool = False,
              authorizer: NodeAuthorizer | None = None) -> Any:
    request = DescribeClientQuotasRequest(components=tuple(
        ComponentData(entity_type=t, match_type=i8(m), match=n) for t, m, n in components), strict=strict)
    return describe_client_quotas(request, _CTX, image=_IMAGE,
                                  authorizer=authorizer or NodeAuthorizer({}, image=lambda: _IMAGE))


def _entities(response: Any) -> list[dict[str, str | None]]:
    assert response.error_code == ErrorCode.none, response.error_message
    return [{e.entity_type: e.entity_name for e in entry.entity} for entry in response.entries]


@pytest.mark.parametrize(("components", "strict", "expected"), [
    ([("user", 0, "alice")], True, [{"user": "alice"}]),
    ([("user", 0, "alice")], False, [{"client-id": "app", "user": "alice"}, {"user": "alice"}]),
    ([("user", 1, None)], True, [{"user": None}]),
    ([("user", 2, None)], True, [{"user": "alice"}, {"user": None}]),
    ([("user", 2, None), ("client-id", 2, None)], True, [{"client-id": "app", "user": "alice"}]),
    ([("ip", 2, None)], False, [{"ip": "10.0.0.1"}]),
    ([("user", 0, "bob")], False, []),
])
def test_filters_match_as_kafkas(components: list[tuple[str, int, str | None]], strict: bool,
                                 expected: list[dict[str, str | None]]) -> None:
    assert sorted(_entities(_describe(*components, strict=strict)), key=repr) == sorted(expected, key=repr)


def test_values_are_the_images() -> None:
    (entry,) = _describe(("user", 0, "alice"), strict=True).entries
    assert [(v.key, float(v.value)) for v in entry.values] == [("consumer_byte_rate", 1024.0)]


@pytest.mark.parametrize(("components", "code", "message"), [
    ([("", 2, None)], ErrorCode.invalid_request, "Invalid empty entity type."),
    ([("user", 2, None), ("user", 0, "a")], ErrorCode.invalid_request, "cannot appear more than once"),
    ([("group", 2, None)], ErrorCode.unsupported_version, "Unsupported entity type group"),
    ([("user", 0, None)], ErrorCode.invalid_request, "MATCH_TYPE_EXACT, but set match string to null"),
    ([("user", 1, "a")], ErrorCode.invalid_request, "MATCH_TYPE_DEFAULT, but also specified a match string"),
    ([("user", 7, None)], ErrorCode.unsupported_version, "Unknown match type 7"),
    ([("ip", 2, None), ("user", 2, None)], ErrorCode.invalid_request, "IP filter component should not be used"),
])
def test_bad_filters_are_refused_with_kafkas_errors(components: list[tuple[str, int, str | None]], code: ErrorCode,
                                                   message: str) -> None:
    refused = _describe(*components)
    assert (refused.error_code, refused.entries) == (code, None)
    assert message in refused.error_message


def test_describe_configs_on_the_cluster_is_required() -> None:
    guarded = NodeAuthorizer({"authorizer.class.name": STANDARD_AUTHORIZER}, image=lambda: _IMAGE)
    refused = _describe(("user", 2, None), authorizer=guarded)
    assert (refused.error_code, refused.entries) == (ErrorCode.cluster_authorization_failed, None)
