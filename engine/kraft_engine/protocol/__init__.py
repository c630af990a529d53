"""Kafka's wire protocol over asyncio streams: framing, request dispatch by api key and version,
and the client connection. Every message body is a kio entity.

Serving (`Listener`)::

    listener = Listener("CONTROLLER", registry=registry, features_provider=features)
    listener.register(VOTE_KEY, min_version=0, max_version=2, handler=handle_vote)
    await listener.start("127.0.0.1", 9093)        # port 0 picks a free port: listener.port
    ...
    await listener.close()

    async def handle_vote(request, ctx: RequestContext):
        return ctx.response_class(...)               # the response of the request's version

- Frames are a 4-byte size, request header v1 or v2 (as the request class's `__header_schema__`
  says), and the kio body; responses use the response class's header version, and ApiVersions
  responses always use response header v0.
- ApiVersions is built in: it lists exactly what was registered (plus itself), with features from
  `features_provider() -> Features(supported, finalized, finalized_epoch)`. An unsupported
  ApiVersions version gets Kafka's v0 UNSUPPORTED_VERSION answer.
- Requests on one connection may be pipelined, but as Kafka mutes a channel the connection is
  not read again while `max_in_flight_requests` (default 1) requests are unanswered or their
  responses not yet taken by the socket: a client that never reads costs one response. Responses
  are written in request order.
- Every frame is bounds-checked against kio's schema before kio's native reader sees it
  (`bounds_checking`: kio 0.6.5 aborts the process on a length it cannot allocate, see
  docs/kio-native-reader-abort.md); a malformed request closes its connection, is logged with the
  peer and api and counted in `kafka_network_malformed_requests_total{listener,request}`. Frames
  above `large_frame_bytes` are checked in a worker thread and decoded item by item; large
  responses are encoded in a worker thread.
- `max.connections` (the listener stops accepting at the limit) and `max.connections.per.ip` (a
  connection over it is closed after accept, logged at INFO), Kafka's defaults.
- `serve_envelope()`: Envelope v0 (Kafka's forwarding), the inner request handled with the
  forwarded principal (`RequestContext.principal`, `client_address`).
- `version_bridging.bridged_handler`: serve a range of versions with a handler written for one.
- `socket.request.max.bytes` (`request_max_bytes`), `connections.max.idle.ms`
  (`connections_max_idle_ms`, negative: never close idle connections, as in Kafka); bad input or an unknown api/version closes that connection with a
  WARNING log and a `kafka_network_connections_closed{reason}` count (`CloseReason` values).
  A handler that raises closes its connection (logged at ERROR), the server keeps serving.
- Metrics (on the registry passed in, else a private one): `kafka_network_requests_total
  {listener,request}`, `kafka_network_errors_total{listener,request,error}`,
  `kafka_network_connections_accepted_total{listener}`,
  `kafka_network_connections_closed_total{listener,reason}`.

Calling (`KafkaConnection`, `KafkaClient`)::

    async with KafkaConnection(host, port, config=ConnectionConfig(...), rng=rng) as conn:
        await conn.connect()
        version = conn.negotiated_version(VOTE_KEY)
        response = await conn.send(request_class(VOTE_KEY, version)(...), timeout_ms=2000)

- Correlation ids, pipelining (many concurrent `send`s), per-request timeouts
  (`RequestTimedOut`; a late answer is discarded), reconnect with exponential backoff and jitter
  (`reconnect.backoff.ms` .. `reconnect.backoff.max.ms`, from an injected `random.Random`), and
  ApiVersions negotiation on every connect (`negotiated_version(api_key)`,
  `peer_api_versions`, `api_versions_response` for features).
- `send()` refuses with `UnsupportedApi` / `UnsupportedVersion` before sending what the peer does
  not serve. `KafkaClient(bootstrap_servers)` fails over between bootstrap addresses.

Helpers: `request_class(api_key, version)` / `response_class(api_key, version)` load kio's
classes (cached); `kio_version_range(api_key)` is what kio can encode; `api_name(api_key)`.
"""

from kraft_engine.protocol.backoff import ExponentialBackoff
from kraft_engine.protocol.client import KafkaClient, parse_bootstrap_servers
from kraft_engine.protocol.connection import ConnectionConfig, KafkaConnection
from kraft_engine.protocol.encoded_responses import EncodedResponse
from kraft_engine.protocol.entities import (
    API_VERSIONS_KEY,
    api_name,
    kio_version_range,
    make_entity,
    request_class,
    response_class,
)
from kraft_engine.protocol.errors import (
    ConnectionFailed,
    ConnectionLost,
    KafkaProtocolError,
    MalformedFrame,
    RequestTimedOut,
    UnsupportedApi,
    UnsupportedVersion,
)
from kraft_engine.protocol.features import NO_FEATURES, Features, FeaturesProvider
from kraft_engine.protocol.file_regions import FileRegion, SplicedResponse
from kraft_engine.protocol.listener import (
    NO_RESPONSE,
    CloseReason,
    Handler,
    Listener,
    RequestContext,
    close_server,
)

__all__ = [
    "API_VERSIONS_KEY",
    "CloseReason",
    "ConnectionConfig",
    "ConnectionFailed",
    "ConnectionLost",
    "EncodedResponse",
    "ExponentialBackoff",
    "Features",
    "FeaturesProvider",
    "FileRegion",
    "Handler",
    "KafkaClient",
    "KafkaConnection",
    "KafkaProtocolError",
    "Listener",
    "MalformedFrame",
    "NO_FEATURES",
    "NO_RESPONSE",
    "RequestContext",
    "RequestTimedOut",
    "SplicedResponse",
    "UnsupportedApi",
    "UnsupportedVersion",
    "api_name",
    "close_server",
    "kio_version_range",
    "make_entity",
    "parse_bootstrap_servers",
    "request_class",
    "response_class",
]
