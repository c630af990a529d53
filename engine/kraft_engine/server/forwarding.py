"""Admin requests a broker forwards to the active controller in an Envelope (KIP-590).

A KRaft broker does not decide CreateTopics, DeleteTopics, CreatePartitions,
IncrementalAlterConfigs, AlterPartitionReassignments, ListPartitionReassignments, ElectLeaders,
AlterUserScramCredentials, CreateAcls or DeleteAcls (the controller authorizes them):
Kafka's ForwardingManager wraps the client's request (header and body, at the version the client
negotiated) in an EnvelopeRequest with the client's principal and address, sends it to the active
controller, and hands the response inside the EnvelopeResponse back to the client. Doing the same
lets the broker advertise every version the controller serves (librdkafka and aiokafka stop short
of the newest), keeps the client's identity for the controller, and works the same against our
controllers and Apache Kafka's.

NOT_CONTROLLER (on the envelope, or from a controller that lost leadership while the request was in
flight) and an unreachable controller are retried until the request's own timeout, as Kafka's
forwarding retries with the new controller; past it the connection is closed and the client
retries. Any other envelope error is the broker's mistake and closes the connection too.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import socket
from typing import Any

from kio.schema.envelope.v0.request import EnvelopeRequest
from kio.schema.errors import ErrorCode

from kraft_engine.protocol import KafkaProtocolError, RequestContext
from kraft_engine.protocol.envelope import encode_principal
from kraft_engine.protocol.framing import SIZE_PREFIX, decode_response, encode_request
from kraft_engine.server.controller_apis import (
    ALTER_PARTITION_REASSIGNMENTS,
    ALTER_USER_SCRAM_CREDENTIALS,
    CREATE_ACLS,
    CREATE_PARTITIONS,
    CREATE_TOPICS,
    DELETE_ACLS,
    DELETE_TOPICS,
    ELECT_LEADERS,
    INCREMENTAL_ALTER_CONFIGS,
    KAFKA_CONTROLLER_VERSIONS,
    LIST_PARTITION_REASSIGNMENTS,
)
from kraft_engine.server.controller_channel import ControllerChannel, ControllerUnavailable

__all__ = ["FORWARDED_API_VERSIONS", "EnvelopeForwarder", "ForwardingFailed"]

logger = logging.getLogger(__name__)

FORWARDED_API_VERSIONS: dict[int, tuple[int, int]] = {
    api_key: KAFKA_CONTROLLER_VERSIONS[api_key]
    for api_key in (CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS, INCREMENTAL_ALTER_CONFIGS,
                    ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS, ELECT_LEADERS,
                    ALTER_USER_SCRAM_CREDENTIALS, CREATE_ACLS, DELETE_ACLS)
}
"""api key -> (min, max) version a broker forwards: the ranges Kafka 4.1's controllers serve (a
Kafka broker advertises the intersection of its own and the controller's, which is these)."""

_DEFAULT_TIMEOUT_MS = 30_000
_RETRY_BACKOFF_S = 0.1


class ForwardingFailed(KafkaProtocolError):
    """The request could not be forwarded (no controller in time, or the envelope was refused)."""


class EnvelopeForwarder:
    def __init__(self, *, channel: ControllerChannel) -> None:
        self._channel = channel

    async def forward(self, request: Any, ctx: RequestContext) -> Any:
        """The controller's response to `request`, of the request's own version."""
        timeout = getattr(request, "timeout", None)
        timeout_ms = _DEFAULT_TIMEOUT_MS if timeout is None else max(1000, int(timeout.total_seconds() * 1000))
        envelope = EnvelopeRequest(
            request_data=encode_request(request, correlation_id=ctx.correlation_id, client_id=ctx.client_id)[SIZE_PREFIX.size:],
            request_principal=encode_principal(ctx.principal),
            client_host_address=_address_bytes(ctx.client_address or ctx.peer[0]),
        )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            retry = await self._attempt(envelope, ctx, timeout_ms=timeout_ms)
            if not isinstance(retry, str):
                return retry
            if loop.time() >= deadline:
                raise ForwardingFailed(f"forwarding {ctx.response_class.__name__}: {retry}")
            logger.debug("Forwarding api %d again: %s", ctx.api_key, retry)
            await asyncio.sleep(_RETRY_BACKOFF_S)

    async def _attempt(self, envelope: EnvelopeRequest, ctx: RequestContext, *, timeout_ms: int) -> Any:
        """The response, or a string saying why this attempt is worth retrying."""
        try:
            answer = await self._channel.send(envelope, timeout_ms=timeout_ms)
        except ControllerUnavailable as error:
            return str(error)
        code = ErrorCode(answer.error_code)
        if code == ErrorCode.not_controller:
            return "the controller is no longer active"
        if code != ErrorCode.none or answer.response_data is None:
            raise ForwardingFailed(f"the controller refused the envelope: {code.name}")
        response = decode_response(answer.response_data, ctx.response_class)
        if _names_not_controller(response):
            return "the controller answered NOT_CONTROLLER"
        return response


def _address_bytes(host: str) -> bytes:
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            return socket.inet_pton(family, host)
        except OSError:
            continue
    return b""


def _names_not_controller(entity: Any) -> bool:
    """True when the response carries NOT_CONTROLLER anywhere (the top level or any item's result:
    a controller that lost leadership refuses every item of a batch)."""
    if not dataclasses.is_dataclass(entity):
        return False
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if field.name == "error_code" and int(value) == int(ErrorCode.not_controller):
            return True
        if isinstance(value, tuple) and any(_names_not_controller(item) for item in value):
            return True
        if dataclasses.is_dataclass(value) and _names_not_controller(value):
            return True
    return False
