"""An asyncio TCP listener that speaks Kafka's wire protocol and dispatches requests to handlers.

A listener owns the parts of Kafka's SocketServer and request channel that every api shares:
framing, header versions, the `socket.request.max.bytes` limit, `connections.max.idle.ms`, the
ApiVersions answer (computed from what is registered here, so it never lies, except where Kafka's
own brokers list versions they refuse: `advertise_from`), ordering, and the
metrics. Handlers only see decoded kio entities and return kio entities.

Ordering and backpressure. A client may send many requests before reading any response. As
Kafka mutes a channel from the moment a request arrives until its response is sent, a connection
is not read again while `max_in_flight_requests` (default 1, Kafka's behaviour) of its requests
are unanswered or their responses are still unsent: a response counts as sent once the socket took
all of it (the transport keeps no bytes of it). A client that never reads therefore costs one
response in memory, and TCP pushes back on it. A larger `max_in_flight_requests` lets handlers of
one connection overlap (responses are still written strictly in request order).

Decoding never trusts a length: every frame is bounds-checked against kio's schema before kio's
native reader sees it (see `bounds_checking`). Frames above `large_frame_bytes` are checked in a
worker thread and read item by item between yields, and a large response is encoded in a worker
thread, so one big request cannot hold the event loop for the whole decode or encode.

Connections. `max.connections`, `max.connections.per.ip` and `max.connections.per.ip.overrides`
are Kafka's: over its address's limit (its override, else the per-ip default, which may be 0 when
overrides admit chosen addresses) a new connection is closed right after accept with one INFO line; at `max.connections` the listener
stops accepting (the connection waits in the kernel's backlog) until one closes, as Kafka's
acceptor waits for a slot. A connection the peer reset is dropped after one INFO line.

Bad input never costs other connections anything: a frame over the size limit (refused from its
size prefix, before the body is read), a negative size, a truncated frame, a malformed header or
body, an api this listener does not serve, or an unsupported version closes that one connection
after logging the reason at WARNING (with the peer and the api) and counting it in
`kafka_network_connections_closed`; a malformed request is also counted per api in
`kafka_network_malformed_requests`. Kafka closes the connection on a request it cannot parse too.
ApiVersions is the exception Kafka makes: an unsupported ApiVersions version is answered with a v0
response carrying UNSUPPORTED_VERSION and the ApiVersions range, so the client can retry lower.

Security (`security=ListenerSecurity`, see `protocol.security`). An SSL or SASL_SSL listener runs
the TLS handshake on accept (`ssl.client.auth` decides whether the client must show a
certificate); a failed handshake is logged at INFO as Kafka's "Failed authentication" and counted
as `ssl_handshake_failed`. On SSL an mTLS client's principal is its certificate's subject mapped
by `ssl.principal.mapping.rules`. A SASL listener serves only ApiVersions, SaslHandshake and
SaslAuthenticate until the connection's `SaslAuthenticator` completes (frames capped at
`sasl.server.max.receive.size` meanwhile); any other request closes it (`illegal_sasl_state`), a
failed authentication is answered and then closed (`authentication_failed`), and a connection
not authenticated within `kraftwerk.sasl.handshake.timeout.ms` is closed
(`authentication_timeout`). Handlers see the principal in `RequestContext.principal`.

A handler that raises is a bug in that handler. We log it with its traceback and close the
connection, after the responses before it were written. Kafka instead answers with an error code
filled in at every level of the response schema; kio gives no generic way to do that for every
api, and an invented partial answer could mislead a client, so a closed connection (which every
Kafka client already treats as retriable) is the honest response.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ipaddress
import logging
import re
import socket
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i64
from prometheus_client import CollectorRegistry

from kraft_engine.invariant import InvariantViolation
from kraft_engine.protocol.encoded_responses import EncodedResponse
from kraft_engine.protocol.entities import (
    API_VERSIONS_KEY,
    api_name,
    error_codes_of,
    kio_version_range,
    request_class,
    response_class,
)
from kraft_engine.protocol.envelope import ANONYMOUS, EnvelopeError, decode_principal
from kraft_engine.protocol.errors import MalformedFrame
from kraft_engine.protocol.features import NO_FEATURES, FeaturesProvider
from kraft_engine.protocol.file_regions import FileRegion, SplicedFrame, SplicedResponse
from kraft_engine.protocol.framing import (
    SIZE_PREFIX,
    check_request_arrays,
    decode_request,
    decode_request_stepwise,
    encode_response,
    encode_response_payload,
    peek_api,
    peek_correlation_id,
)
from kraft_engine.protocol.large_requests import PARK_EVERY_ITEMS, disown, large_request, park, release
from kraft_engine.protocol.metrics import ListenerMetrics, metrics_for
from kraft_engine.protocol.principal_mapping import NoMatchingRule, subject_name
from kraft_engine.protocol.sasl import (
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    SaslAuthenticator,
    SaslStateError,
    SaslStep,
)
from kraft_engine.protocol.security import ListenerSecurity

__all__ = [
    "CloseReason",
    "Handler",
    "Listener",
    "RequestContext",
]

logger = logging.getLogger(__name__)

DEFAULT_REQUEST_MAX_BYTES = 104857600  # socket.request.max.bytes
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600000  # connections.max.idle.ms
DEFAULT_MAX_IN_FLIGHT_REQUESTS = 1  # Kafka mutes a channel until its response is sent
DEFAULT_MAX_CONNECTIONS = 2147483647  # max.connections
DEFAULT_MAX_CONNECTIONS_PER_IP = 2147483647  # max.connections.per.ip
DEFAULT_LARGE_FRAME_BYTES = 256 * 1024
"""Frames above this are bounds-checked in a worker thread and decoded item by item."""
ENVELOPE_KEY = 58
_ITEMS_PER_STEP = 500
_LARGE_RESPONSE_ITEMS = 1000
_WRITE_CHUNK_BYTES = 256 * 1024
"""Responses above this are written a chunk at a time (`_Connection._send_in_chunks`)."""
_ACCEPT_BACKLOG = 100


class CloseReason:
    """Values of the `reason` label of `kafka_network_connections_closed`."""

    PEER_CLOSED = "peer_closed"
    IDLE = "idle"
    REQUEST_TOO_LARGE = "request_too_large"
    INVALID_SIZE = "invalid_size"
    TRUNCATED_FRAME = "truncated_frame"
    MALFORMED_HEADER = "malformed_header"
    MALFORMED_BODY = "malformed_body"
    UNKNOWN_API_KEY = "unknown_api_key"
    UNSUPPORTED_VERSION = "unsupported_version"
    HANDLER_ERROR = "handler_error"
    SOCKET_ERROR = "socket_error"
    TOO_MANY_CONNECTIONS = "too_many_connections"
    LISTENER_CLOSED = "listener_closed"
    SSL_HANDSHAKE_FAILED = "ssl_handshake_failed"
    AUTHENTICATION_FAILED = "authentication_failed"
    AUTHENTICATION_TIMEOUT = "authentication_timeout"
    ILLEGAL_SASL_STATE = "illegal_sasl_state"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request and how: everything from the header and the socket a handler may need."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    peer: tuple[str, int]
    listener_name: str
    principal: str = ANONYMOUS
    """Kafka's principal (`User:ANONYMOUS` on a plaintext listener; an Envelope's forwarded one)."""
    client_address: str | None = None
    """The original client's address when a broker forwarded the request in an Envelope."""

    @property
    def response_class(self) -> type[Any]:
        """The kio response class of the same api and version as the request."""
        return response_class(self.api_key, self.api_version)

    @property
    def response_schema(self) -> Any:
        """The kio module of that response class, whose nested entities a handler builds."""
        return sys.modules[self.response_class.__module__]


Handler = Callable[[Any, RequestContext], Awaitable[Any]]
"""`async def handler(request, ctx) -> response`: the response must be of `ctx.response_class`,
or `NO_RESPONSE` for a request the client expects no answer to (Produce with acks=0)."""


class _NoResponse:
    """The handler's answer when the protocol sends none back (Kafka's NoOpResponse)."""

    def __repr__(self) -> str:
        return "NO_RESPONSE"


NO_RESPONSE: Any = _NoResponse()


@dataclass(frozen=True, slots=True)
class _Route:
    handler: Handler
    request_cls: type[Any]
    response_cls: type[Any]


class _Close(Exception):
    """Internal: stop reading this connection for `reason` (logged at `level`)."""

    def __init__(self, reason: str, detail: str, *, level: int = logging.WARNING) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.level = level


# Kafka validates the client software name and version of ApiVersions v3+ with this pattern.
_SOFTWARE_NAME_VERSION = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
_ZERO_THROTTLE = timedelta(0)
_END = object()  # sentinel queued after the last response of a connection



async def close_server(server: asyncio.Server, connections: set[asyncio.Task[None]]) -> None:
    """Stop accepting, cancel every connection task and wait until they and the server are gone.

    Shared by every asyncio server of the node (the Kafka listener, the metrics/health endpoint)."""
    server.close()
    for task in list(connections):
        task.cancel()
    if connections:
        await asyncio.gather(*connections, return_exceptions=True)
    await server.wait_closed()

def _canonical_ip(address: str) -> str:
    """One spelling per address, as Java's InetAddress compares them: an IPv4-mapped IPv6 peer
    (a dual-stack socket) is its IPv4 address, and IPv6 is written compressed."""
    try:
        parsed = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
        return str(parsed.ipv4_mapped)
    return str(parsed)


class Listener:
    """One listener (Kafka's `listeners` entry): a name, a socket, and the apis it serves."""

    def __init__(
        self,
        name: str = "PLAINTEXT",
        *,
        request_max_bytes: int = DEFAULT_REQUEST_MAX_BYTES,
        connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS,
        max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT_REQUESTS,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP,
        max_connections_per_ip_overrides: Mapping[str, int] | None = None,
        large_frame_bytes: int = DEFAULT_LARGE_FRAME_BYTES,
        features_provider: FeaturesProvider | None = None,
        registry: CollectorRegistry | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        for key, value in (
            ("socket.request.max.bytes", request_max_bytes),
            ("max_in_flight_requests", max_in_flight_requests),
            ("max.connections", max_connections),
            ("large_frame_bytes", large_frame_bytes),
        ):
            if value <= 0:
                raise ValueError(f"{key} must be positive, got {value}")
        overrides = {_canonical_ip(ip): count for ip, count in (max_connections_per_ip_overrides or {}).items()}
        if max_connections_per_ip < 0 or any(count < 0 for count in overrides.values()):
            raise ValueError("max.connections.per.ip and its overrides must not be negative")
        if max_connections_per_ip == 0 and not overrides:
            raise ValueError("max.connections.per.ip can be set to zero only if max.connections.per.ip.overrides "
                             "property is set.")
        # Kafka's Selector keeps idle connections forever when connections.max.idle.ms is
        # negative; 0 would close every connection before its first request.
        if connections_max_idle_ms == 0:
            raise ValueError("connections.max.idle.ms must be positive, or negative to never close idle connections")
        self.name = name
        self.request_max_bytes = request_max_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.max_in_flight_requests = max_in_flight_requests
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        #: Per-address limits by canonical IP (`_canonical_ip`), over `max_connections_per_ip`.
        self.max_connections_per_ip_overrides = overrides
        self.large_frame_bytes = large_frame_bytes
        self._socket: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._open_connections = 0
        self._per_ip: dict[str, int] = {}
        self._slot_freed: asyncio.Event | None = None
        self._malformed_counters: dict[int, Any] = {}
        self._features_provider = features_provider or (lambda: NO_FEATURES)
        self.registry = registry if registry is not None else CollectorRegistry()
        self.metrics: ListenerMetrics = metrics_for(self.registry)
        self._routes: dict[tuple[int, int], _Route] = {}
        self._envelope_authorize: Callable[[RequestContext], bool] | None = None
        self._ranges: dict[int, tuple[int, int]] = {}
        self._advertised_min: dict[int, int] = {}
        self._connections: set[asyncio.Task[None]] = set()
        self._live: set[_Connection] = set()
        self._request_counters: dict[int, Any] = {}
        self._error_counters: dict[tuple[int, ErrorCode], Any] = {}
        self._close_counters: dict[str, Any] = {}
        api_versions_range = kio_version_range(API_VERSIONS_KEY)
        if api_versions_range is None:
            raise InvariantViolation("kio lacks ApiVersions")
        self._add_routes(API_VERSIONS_KEY, api_versions_range, self._handle_api_versions)
        self.security = security or ListenerSecurity()
        if self.security.sasl is not None:
            # Served by each connection's SaslAuthenticator (`_Connection._sasl`), never by a handler.
            self._add_routes(SASL_HANDSHAKE_KEY, (1, 1), _served_by_connection)
            self._add_routes(SASL_AUTHENTICATE_KEY, (0, 2), _served_by_connection)

    # --- registry ------------------------------------------------------------------------------

    def register(self, api_key: int, *, min_version: int, max_version: int, handler: Handler) -> None:
        """Serve `api_key` versions [min_version, max_version] with `handler`.

        An api may be registered in several ranges (different handlers per range), but the union
        must stay contiguous because ApiVersions advertises one range per api. ApiVersions itself
        is built in.
        """
        if api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
            raise ValueError(f"{api_name(api_key)} is served by the listener itself")
        known = kio_version_range(api_key)
        if known is None:
            raise ValueError(f"unknown api key {api_key}")
        if not known[0] <= min_version <= max_version <= known[1]:
            raise ValueError(
                f"{api_name(api_key)} versions {min_version}..{max_version} are outside what kio "
                f"encodes ({known[0]}..{known[1]})"
            )
        if self._socket is not None:
            raise RuntimeError("register handlers before the listener starts")
        current = self._ranges.get(api_key)
        if current is not None:
            if min_version <= current[1] and current[0] <= max_version:
                raise ValueError(f"{api_name(api_key)} versions {min_version}..{max_version} overlap {current}")
            if max_version + 1 != current[0] and current[1] + 1 != min_version:
                raise ValueError(f"{api_name(api_key)} ranges must be contiguous for ApiVersions")
        self._add_routes(api_key, (min_version, max_version), handler)

    def register_all(self, handlers: Mapping[int, Handler], *, versions: Mapping[int, tuple[int, int]]) -> None:
        """`register` each of `handlers` (api key -> handler) for its range in `versions`."""
        for api_key, handler in handlers.items():
            low, high = versions[api_key]
            self.register(api_key, min_version=low, max_version=high, handler=handler)

    def advertise_from(self, api_key: int, min_version: int) -> None:
        """List `api_key` in ApiVersions from `min_version`, below the lowest version served.

        Kafka's one such case (KAFKA-18659): Produce v0-2 were removed in Kafka 4.0 but its
        brokers still list Produce from v0, because librdkafka refuses to produce to a broker
        whose Produce range does not start at 0; a v0-2 request is refused like any version not
        served (the connection is closed)."""
        served = self._ranges.get(api_key)
        if served is None:
            raise ValueError(f"{api_name(api_key)} is not served here")
        if not 0 <= min_version < served[0]:
            raise ValueError(f"{api_name(api_key)} is served from v{served[0]}; cannot advertise it from v{min_version}")
        self._advertised_min[api_key] = min_version

    def _add_routes(self, api_key: int, versions: tuple[int, int], handler: Handler) -> None:
        for version in range(versions[0], versions[1] + 1):
            self._routes[(api_key, version)] = _Route(
                handler=handler,
                request_cls=request_class(api_key, version),
                response_cls=response_class(api_key, version),
            )
        current = self._ranges.get(api_key)
        if current is None:
            self._ranges[api_key] = versions
        else:
            self._ranges[api_key] = (min(current[0], versions[0]), max(current[1], versions[1]))

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """The (min, max) version of every api this listener serves, ApiVersions included."""
        return dict(sorted(self._ranges.items()))

    # --- lifecycle -----------------------------------------------------------------------------

    def serve_envelope(self, *, authorize: Callable[[RequestContext], bool] | None = None) -> None:
        """Serve Envelope v0 (Kafka's forwarding from brokers): the request inside is decoded with
        the same checks as any other, handled by this listener's handler for its api with the
        principal and client address the envelope carries, and answered inside an
        EnvelopeResponse. `authorize(ctx)` vets the sender (Kafka asks CLUSTER_ACTION on the
        cluster); a refused one gets CLUSTER_AUTHORIZATION_FAILED and its request is not run."""
        self._envelope_authorize = authorize
        self._add_routes(ENVELOPE_KEY, (0, 0), self._handle_envelope)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Bind and start accepting. Port 0 picks a free port; read it back from `port`."""
        if self._socket is not None:
            raise RuntimeError(f"listener {self.name} already started")
        sock = socket.create_server((host, port), backlog=_ACCEPT_BACKLOG)
        sock.setblocking(False)
        self._socket = sock
        self._slot_freed = asyncio.Event()
        self._accept_task = asyncio.get_running_loop().create_task(self._accept_loop(sock))

    @property
    def address(self) -> tuple[str, int]:
        """The (host, port) the listener is bound to."""
        if self._socket is None:
            raise RuntimeError(f"listener {self.name} is not started")
        sockname = self._socket.getsockname()
        return sockname[0], sockname[1]

    @property
    def port(self) -> int:
        return self.address[1]

    def buffered_response_bytes(self) -> int:
        """Response bytes written but not yet taken by the sockets, over all connections."""
        return sum(c.writer.transport.get_write_buffer_size() for c in self._live if not c.writer.transport.is_closing())

    async def close(self) -> None:
        """Stop accepting, close every connection, and wait until they are gone."""
        sock, self._socket = self._socket, None
        accept, self._accept_task = self._accept_task, None
        if accept is not None:
            accept.cancel()
            with contextlib.suppress(BaseException):
                await accept
        if sock is not None:
            sock.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- metrics -------------------------------------------------------------------------------

    def _count_request(self, api_key: int) -> None:
        counter = self._request_counters.get(api_key)
        if counter is None:
            counter = self.metrics.requests.labels(self.name, api_name(api_key))
            self._request_counters[api_key] = counter
        counter.inc()

    def _count_errors(self, api_key: int, response: Any) -> None:
        self._count_error_counts(api_key, error_codes_of(response))

    def _count_error_counts(self, api_key: int, counts: Mapping[ErrorCode, int]) -> None:
        for code, n in counts.items():
            counter = self._error_counters.get((api_key, code))
            if counter is None:
                counter = self.metrics.errors.labels(self.name, api_name(api_key), code.name.upper())
                self._error_counters[(api_key, code)] = counter
            counter.inc(n)

    def _count_malformed(self, api_key: int) -> None:
        counter = self._malformed_counters.get(api_key)
        if counter is None:
            counter = self.metrics.malformed_requests.labels(self.name, api_name(api_key))
            self._malformed_counters[api_key] = counter
        counter.inc()

    def _count_close(self, reason: str) -> None:
        counter = self._close_counters.get(reason)
        if counter is None:
            counter = self.metrics.connections_closed.labels(self.name, reason)
            self._close_counters[reason] = counter
        counter.inc()

    # --- connections ---------------------------------------------------------------------------

    async def _accept_loop(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        slot_freed = self._slot_freed
        if slot_freed is None:
            raise InvariantViolation("accept loop runs before start")
        while True:
            # Kafka's acceptor waits for a free slot before it accepts: the connection waits in
            # the kernel's backlog meanwhile.
            while self._open_connections >= self.max_connections:
                slot_freed.clear()
                await slot_freed.wait()
            conn, address = await loop.sock_accept(sock)
            ip = _canonical_ip(str(address[0]))
            limit = self.max_connections_per_ip_overrides.get(ip, self.max_connections_per_ip)
            if self._per_ip.get(ip, 0) >= limit:
                logger.info("Rejected connection from %s, address already has the configured maximum of %d "
                            "connections.", ip, limit)
                self._count_close(CloseReason.TOO_MANY_CONNECTIONS)
                conn.close()
                continue
            self._open_connections += 1
            self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
            task = loop.create_task(self._serve(conn, (ip, int(address[1]))))
            self._connections.add(task)

    async def _serve(self, conn: socket.socket, peer: tuple[str, int]) -> None:
        ip = peer[0]
        task = asyncio.current_task()
        if task is None:
            raise InvariantViolation("connection runs outside a task")
        self.metrics.connections_accepted.labels(self.name).inc()
        connection: _Connection | None = None
        try:
            opened = await self._open(conn, peer)
            if opened is None:
                return
            reader, writer, principal = opened
            connection = _Connection(self, reader, writer, peer=peer, principal=principal)
            self._live.add(connection)
            await connection.run()
        except asyncio.CancelledError:
            # Only close() cancels connection tasks; the cancellation ends here.
            if connection is None:
                conn.close()
        finally:
            if connection is not None:
                self._live.discard(connection)
            self._connections.discard(task)
            self._open_connections -= 1
            left = self._per_ip[ip] - 1
            if left:
                self._per_ip[ip] = left
            else:
                del self._per_ip[ip]
            if self._slot_freed is not None:
                self._slot_freed.set()

    async def _open(self, conn: socket.socket, peer: tuple[str, int]
                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, str] | None:
        """Streams over the accepted socket, through the TLS handshake on an SSL listener, and
        the peer's principal (its certificate's mapped subject, else ANONYMOUS). None when the
        handshake fails: logged at INFO as Kafka logs a failed authentication, and counted."""
        security = self.security
        context = security.ssl_context
        if context is None:
            reader, writer = await asyncio.open_connection(sock=conn)
            return reader, writer, ANONYMOUS
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=2**16, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol, sock=conn, ssl=context, ssl_handshake_timeout=security.handshake_timeout_ms / 1000)
        except (OSError, TimeoutError, EOFError) as e:  # ssl.SSLError is an OSError
            conn.close()
            self._refuse(peer, CloseReason.SSL_HANDSHAKE_FAILED, f"SSL handshake failed: {e}")
            return None
        writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        principal = ANONYMOUS
        ssl_object = writer.get_extra_info("ssl_object")
        certificate = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if certificate and security.principal_mapper is not None and security.sasl is None:
            try:
                principal = "User:" + security.principal_mapper.name(subject_name(certificate))
            except (NoMatchingRule, ValueError) as e:
                transport.abort()
                self._refuse(peer, CloseReason.AUTHENTICATION_FAILED, f"no principal for the certificate: {e}")
                return None
        return reader, writer, principal

    def _refuse(self, peer: tuple[str, int], reason: str, detail: str) -> None:
        logger.info("Failed authentication with /%s on listener %s (%s)", peer[0], self.name, detail)
        self._count_close(reason)

    # --- Envelope ------------------------------------------------------------------------------

    async def _handle_envelope(self, request: Any, ctx: RequestContext) -> Any:
        cls = ctx.response_class
        if self._envelope_authorize is not None and not self._envelope_authorize(ctx):
            logger.info("Refusing an Envelope from %s (%s:%s) on listener %s: no CLUSTER_ACTION on the cluster",
                        ctx.principal, ctx.peer[0], ctx.peer[1], self.name)
            return cls(error_code=ErrorCode.cluster_authorization_failed, response_data=None)
        try:
            principal = decode_principal(request.request_principal)
            inner = request.request_data
            api_key, api_version = peek_api(inner)
            route = self._routes.get((api_key, api_version))
            if route is None or api_key == ENVELOPE_KEY:
                raise EnvelopeError(
                    ErrorCode.unsupported_version if api_key in self._ranges else ErrorCode.invalid_request,
                    f"api key {api_key} ({api_name(api_key)}) version {api_version} is not served here",
                )
            header, body = decode_request(inner, route.request_cls)
        except (EnvelopeError, MalformedFrame) as e:
            code = e.error_code if isinstance(e, EnvelopeError) else ErrorCode.invalid_request
            logger.info("Refusing an Envelope from %s:%s on listener %s: %s", ctx.peer[0], ctx.peer[1], self.name, e)
            return cls(error_code=code, response_data=None)
        self._count_request(api_key)
        address = bytes(request.client_host_address)
        inner_ctx = RequestContext(
            api_key=api_key, api_version=api_version, correlation_id=header.correlation_id,
            client_id=header.client_id, peer=ctx.peer, listener_name=ctx.listener_name, principal=principal,
            client_address=socket.inet_ntop(socket.AF_INET6 if len(address) == 16 else socket.AF_INET, address)
            if len(address) in (4, 16) else None,
        )
        response = await route.handler(body, inner_ctx)
        if isinstance(response, EncodedResponse) and response.response_cls is route.response_cls:
            self._count_error_counts(api_key, response.error_counts)
            payload = response.frame(correlation_id=header.correlation_id)[SIZE_PREFIX.size:]
            return cls(error_code=ErrorCode.none, response_data=payload)
        if isinstance(response, SplicedResponse):
            response = response.materialize()  # inside an Envelope the bytes travel in the outer frame
        if type(response) is not route.response_cls:
            raise TypeError(f"handler for {api_name(api_key)} v{api_version} returned {type(response).__qualname__}")
        self._count_errors(api_key, response)
        payload = encode_response_payload(response, correlation_id=header.correlation_id)
        return cls(error_code=ErrorCode.none, response_data=payload)

    # --- ApiVersions ---------------------------------------------------------------------------

    async def _handle_api_versions(self, request: Any, ctx: RequestContext) -> Any:
        cls = ctx.response_class
        if ctx.api_version >= 3 and not (
            _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_name)
            and _SOFTWARE_NAME_VERSION.fullmatch(request.client_software_version)
        ):
            return _api_versions_response(cls, error_code=ErrorCode.invalid_request, api_keys=())
        nested = sys.modules[cls.__module__].ApiVersion
        api_keys = tuple(
            nested(api_key=i16(key), min_version=i16(self._advertised_min.get(key, low)), max_version=i16(high))
            for key, (low, high) in sorted(self._ranges.items())
        )
        if ctx.api_version < 3:
            return _api_versions_response(cls, error_code=ErrorCode.none, api_keys=api_keys)
        module = sys.modules[cls.__module__]
        features = self._features_provider()
        supported = tuple(
            module.SupportedFeatureKey(name=name, min_version=i16(low), max_version=i16(high))
            for name, (low, high) in sorted(features.supported.items())
            # ApiVersions v0-v3 omit features whose minimum supported version is 0: older
            # clients fail to parse a range starting at 0.
            if ctx.api_version >= 4 or low != 0
        )
        finalized = tuple(
            module.FinalizedFeatureKey(name=name, max_version_level=i16(level), min_version_level=i16(level))
            for name, level in sorted(features.finalized.items())
        )
        return cls(
            error_code=ErrorCode.none,
            api_keys=api_keys,
            throttle_time=_ZERO_THROTTLE,
            supported_features=supported,
            finalized_features_epoch=i64(features.finalized_epoch),
            finalized_features=finalized,
        )

    def _unsupported_api_versions_frame(self, correlation_id: int) -> bytes:
        """Kafka's answer to an ApiVersions request of a version it does not speak: a v0
        response with UNSUPPORTED_VERSION that lists the ApiVersions range it does speak."""
        cls = response_class(API_VERSIONS_KEY, 0)
        low, high = self._ranges[API_VERSIONS_KEY]
        nested = sys.modules[cls.__module__].ApiVersion
        response = cls(
            error_code=ErrorCode.unsupported_version,
            api_keys=(nested(api_key=i16(API_VERSIONS_KEY), min_version=i16(low), max_version=i16(high)),),
        )
        self._count_errors(API_VERSIONS_KEY, response)
        return encode_response(response, correlation_id=correlation_id)


async def _served_by_connection(request: Any, ctx: RequestContext) -> Any:
    raise InvariantViolation(f"{api_name(ctx.api_key)} reached a handler: the connection's authenticator serves it")


def _close_unsent_regions(task: asyncio.Task[Any]) -> None:
    """A response that will never be written gives its file regions' descriptors back."""
    if task.cancelled() or task.exception() is not None:
        return
    result = task.result()
    if isinstance(result, SplicedFrame):
        result.close()


def _api_versions_response(cls: type[Any], *, error_code: ErrorCode, api_keys: tuple[Any, ...]) -> Any:
    if cls.__version__ == 0:
        return cls(error_code=error_code, api_keys=api_keys)
    return cls(error_code=error_code, api_keys=api_keys, throttle_time=_ZERO_THROTTLE)


def _response_items(response: Any) -> int:
    """How many items a response's arrays hold, two levels deep: the cost of encoding it."""
    total = 0
    for f in dataclasses.fields(response):
        value = getattr(response, f.name)
        if type(value) is tuple:
            total += len(value)
            if len(value) <= _LARGE_RESPONSE_ITEMS and value and dataclasses.is_dataclass(value[0]):
                for item in value:
                    for g in dataclasses.fields(item):
                        nested = getattr(item, g.name)
                        if type(nested) is tuple:
                            total += len(nested)
    return total


class _Connection:
    """One accepted socket: a read loop that decodes and dispatches, a write loop that sends
    responses in request order."""

    def __init__(self, listener: Listener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 peer: tuple[str, int], principal: str = ANONYMOUS) -> None:
        self.listener = listener
        self.principal = principal
        sasl = listener.security.sasl
        self.authenticator = SaslAuthenticator(sasl, peer=f"/{peer[0]}") if sasl is not None else None
        #: Set by a failed SASL step: the connection closes once that step's answer is written.
        self.close_after_response: str | None = None
        self._authentication_deadline: asyncio.TimerHandle | None = None
        self.reader = reader
        self.writer = writer
        # A response counts as sent once the socket took all of it: drain() waits for an empty
        # transport buffer, so the connection holds at most the response being sent.
        # asyncio's TLS transport pauses at `size >= high` (the socket transport at `size > high`),
        # so high=0 would pause it with an empty buffer and never resume: 1 byte means the same.
        writer.transport.set_write_buffer_limits(high=0 if listener.security.ssl_context is None else 1)
        self.peer = peer  # from accept: a connection reset at once has no peer name left to ask for
        self.loop = asyncio.get_running_loop()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        # A slot is taken before a request is read and given back once its response is sent, so
        # the connection is muted while max_in_flight_requests are outstanding.
        self.slots = asyncio.Semaphore(listener.max_in_flight_requests)
        self.aborted = False
        self.in_flight = 0
        # None: idle connections are never closed (a negative connections.max.idle.ms).
        self.idle_s: float | None = (
            listener.connections_max_idle_ms / 1000 if listener.connections_max_idle_ms > 0 else None
        )
        self.idle: asyncio.Timeout | None = None
        self.close_reason: str | None = None

    def _authentication_timed_out(self) -> None:
        self._authentication_deadline = None
        if self.authenticator is not None and not self.authenticator.complete:
            self._note_close(CloseReason.AUTHENTICATION_TIMEOUT,
                             f"not authenticated within {self.listener.security.handshake_timeout_ms} ms",
                             level=logging.INFO)
            self._abort()

    def _end_authentication_deadline(self) -> None:
        if self._authentication_deadline is not None:
            self._authentication_deadline.cancel()
            self._authentication_deadline = None

    async def run(self) -> None:
        write_task = self.loop.create_task(self._write_loop())
        if self.authenticator is not None:
            self._authentication_deadline = self.loop.call_later(
                self.listener.security.handshake_timeout_ms / 1000, self._authentication_timed_out)
        try:
            try:
                await self._read_loop()
            except _Close as close:
                self._note_close(close.reason, close.detail, level=close.level)
            except TimeoutError:
                self._note_close(
                    CloseReason.IDLE,
                    f"idle for more than {self.listener.connections_max_idle_ms} ms",
                    level=logging.INFO,
                )
            except (ConnectionError, OSError) as e:
                self._note_close(CloseReason.SOCKET_ERROR, f"socket error: {e}", level=logging.INFO)
            if not write_task.done():
                # Responses already owed are still delivered, then the writer ends the connection.
                self.queue.put_nowait(_END)
                await write_task
        except asyncio.CancelledError:
            self._note_close(CloseReason.LISTENER_CLOSED, "listener closing", level=logging.DEBUG)
            raise
        finally:
            self._end_authentication_deadline()
            if not write_task.done():
                write_task.cancel()
            with contextlib.suppress(BaseException):
                await write_task
            self._drain_queue()
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()
            self.listener._count_close(self.close_reason or CloseReason.PEER_CLOSED)

    def _idle_deadline(self) -> float | None:
        """When the connection counts as idle if nothing arrives before then (None: never)."""
        return None if self.idle_s is None else self.loop.time() + self.idle_s

    def _note_close(self, reason: str, detail: str, *, level: int) -> None:
        if self.close_reason is not None:
            return
        self.close_reason = reason
        logger.log(level, "Closing connection from %s:%s on listener %s: %s (reason %s)",
                   self.peer[0], self.peer[1], self.listener.name, detail, reason)

    def _drain_queue(self) -> None:
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if isinstance(item, asyncio.Task):
                item.cancel()
                item.add_done_callback(_close_unsent_regions)

    # --- reading -------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        listener = self.listener
        reader = self.reader
        sasl = listener.security.sasl
        async with asyncio.timeout(self._idle_deadline()) as idle:
            self.idle = idle
            while True:
                # Muted: nothing more is read while the connection's slots are taken.
                await self.slots.acquire()
                if self.aborted:
                    return
                prefix = await reader.read(4)
                if not prefix:
                    self._note_close(CloseReason.PEER_CLOSED, "peer closed the connection", level=logging.DEBUG)
                    return
                if len(prefix) < 4:
                    try:
                        prefix += await reader.readexactly(4 - len(prefix))
                    except asyncio.IncompleteReadError as e:
                        raise _Close(CloseReason.TRUNCATED_FRAME, "connection closed inside a size prefix") from e
                (size,) = SIZE_PREFIX.unpack(prefix)
                if size < 0:
                    raise _Close(CloseReason.INVALID_SIZE, f"negative request size {size}")
                if sasl is not None and self.authenticator is not None and not self.authenticator.complete:
                    # Kafka's sasl.server.max.receive.size: before authentication a frame is small.
                    max_bytes, max_key = sasl.max_receive_bytes, "sasl.server.max.receive.size"
                else:
                    max_bytes, max_key = listener.request_max_bytes, "socket.request.max.bytes"
                if size > max_bytes:
                    raise _Close(
                        CloseReason.REQUEST_TOO_LARGE,
                        f"request size {size} exceeds {max_key} {max_bytes}",
                    )
                try:
                    frame = await reader.readexactly(size)
                except asyncio.IncompleteReadError as e:
                    raise _Close(
                        CloseReason.TRUNCATED_FRAME,
                        f"connection closed after {len(e.partial)} of {size} request bytes",
                    ) from e
                self.in_flight += 1
                idle.reschedule(None)
                self.queue.put_nowait(self._dispatch(frame))

    def _malformed(self, error: MalformedFrame, api_key: int, api_version: int) -> _Close:
        self.listener._count_malformed(api_key)
        reason = CloseReason.MALFORMED_HEADER if error.part == "header" else CloseReason.MALFORMED_BODY
        return _Close(reason, f"{error} ({api_name(api_key)} api key {api_key} version {api_version})")

    def _dispatch(self, frame: bytes) -> Any:
        """Decode one request and start its handler; returns what the writer awaits or writes."""
        listener = self.listener
        try:
            api_key, api_version = peek_api(frame)
        except MalformedFrame as e:
            raise _Close(CloseReason.MALFORMED_HEADER, str(e)) from e
        authenticator = self.authenticator
        if authenticator is not None:
            try:
                authenticator.check_request(api_key, api_name(api_key))
            except SaslStateError as e:
                raise _Close(CloseReason.ILLEGAL_SASL_STATE, str(e)) from e
        route = listener._routes.get((api_key, api_version))
        if route is None:
            if api_key == API_VERSIONS_KEY:
                try:
                    correlation_id = peek_correlation_id(frame)
                except MalformedFrame as e:
                    raise _Close(CloseReason.MALFORMED_HEADER, str(e)) from e
                listener._count_request(api_key)
                return listener._unsupported_api_versions_frame(correlation_id)
            if api_key in listener._ranges:
                low, high = listener._ranges[api_key]
                raise _Close(
                    CloseReason.UNSUPPORTED_VERSION,
                    f"{api_name(api_key)} (api key {api_key}) version {api_version} is not supported "
                    f"(supported {low}..{high})",
                )
            raise _Close(
                CloseReason.UNKNOWN_API_KEY,
                f"api key {api_key} ({api_name(api_key)}) version {api_version} is not served by this listener",
            )
        if len(frame) > listener.large_frame_bytes:
            return self.loop.create_task(self._handle_large(route, frame, api_key, api_version))
        try:
            header, body = decode_request(frame, route.request_cls)
        except MalformedFrame as e:
            raise self._malformed(e, api_key, api_version) from e
        ctx = self._context(header, api_key, api_version)
        if authenticator is not None and not authenticator.complete:
            return self.loop.create_task(self._sasl(authenticator, route, body, ctx))
        return self.loop.create_task(self._handle(route, body, ctx))

    async def _sasl(self, authenticator: SaslAuthenticator, route: _Route, body: Any, ctx: RequestContext) -> bytes:
        """A request before authentication completes: ApiVersions, SaslHandshake, SaslAuthenticate."""
        if ctx.api_key == API_VERSIONS_KEY:
            authenticator.note_api_versions()
            return self._finish(ctx, await route.handler(body, ctx))
        step: SaslStep
        if ctx.api_key == SASL_HANDSHAKE_KEY:
            step = authenticator.handshake(body, route.response_cls)
        else:
            step = await authenticator.authenticate(body, route.response_cls)
        if step.close_reason is not None:
            self.close_after_response = step.close_reason
        elif authenticator.complete and authenticator.principal is not None:
            self.principal = authenticator.principal
            self._end_authentication_deadline()
        return self._finish(ctx, step.response)

    def _context(self, header: Any, api_key: int, api_version: int) -> RequestContext:
        self.listener._count_request(api_key)
        return RequestContext(
            api_key=api_key,
            api_version=api_version,
            correlation_id=header.correlation_id,
            client_id=header.client_id,
            peer=self.peer,
            listener_name=self.listener.name,
            principal=self.principal,
        )

    async def _handle_large(self, route: _Route, frame: bytes, api_key: int, api_version: int) -> bytes | SplicedFrame:
        """A large frame: bounds-checked and its arrays found in a worker thread (pure Python
        walks over every item, so the loop keeps its turns), then read by kio item by item,
        yielding between steps. When it holds many items, what it allocated is kept out of the
        garbage collector's walks until its response is encoded, and freed in a worker thread
        (`large_requests`); a large frame of few items (a Produce of big batches) needs neither."""
        try:
            arrays = await asyncio.to_thread(check_request_arrays, frame, route.request_cls)
        except MalformedFrame as e:
            raise self._malformed(e, api_key, api_version) from e
        many = any(a.count > _ITEMS_PER_STEP for a in arrays)
        with large_request() if many else contextlib.nullcontext():
            try:
                steps = decode_request_stepwise(frame, route.request_cls, arrays=arrays, items_per_step=_ITEMS_PER_STEP)
                read = 0
                while True:
                    try:
                        next(steps)
                    except StopIteration as done:
                        header, body = done.value
                        break
                    read += _ITEMS_PER_STEP
                    if read % PARK_EVERY_ITEMS == 0:
                        park()  # the items read so far are out of the collector's walks (large_requests)
                    await asyncio.sleep(0)
            except MalformedFrame as e:
                raise self._malformed(e, api_key, api_version) from e
            answer = await self._handle(route, body, self._context(header, api_key, api_version), large=True)
            if many:
                # This frame holds the request's last reference: its items are freed in a worker.
                parts = disown(body)
                del body
                await asyncio.to_thread(release, parts)
            return answer

    async def _handle(self, route: _Route, body: Any, ctx: RequestContext, *, large: bool = False) -> bytes | SplicedFrame:
        started = time.monotonic()
        try:
            return await self._respond(route, body, ctx, large=large)
        finally:
            self.listener.metrics.total_time_ms.labels(self.listener.name, api_name(ctx.api_key)).observe(
                (time.monotonic() - started) * 1000)

    async def _respond(self, route: _Route, body: Any, ctx: RequestContext, *, large: bool) -> bytes | SplicedFrame:
        response = await route.handler(body, ctx)
        if response is NO_RESPONSE:
            return b""  # the writer keeps the order and frees the slot, and writes nothing
        if isinstance(response, EncodedResponse):
            if response.response_cls is not route.response_cls:
                raise TypeError(f"handler for {api_name(ctx.api_key)} v{ctx.api_version} returned an encoded "
                                f"{response.response_cls.__module__}, expected {route.response_cls.__module__}")
            self.listener._count_error_counts(ctx.api_key, response.error_counts)
            return response.frame(correlation_id=ctx.correlation_id)
        if isinstance(response, SplicedResponse):
            try:
                if large:
                    return await asyncio.to_thread(self._finish_spliced, route, ctx, response)
                return self._finish_spliced(route, ctx, response)
            except BaseException:
                response.close()
                raise
        if type(response) is not route.response_cls:
            raise TypeError(
                f"handler for {api_name(ctx.api_key)} v{ctx.api_version} returned "
                f"{type(response).__module__}.{type(response).__qualname__}, expected {route.response_cls.__module__}"
            )
        if large or _response_items(response) > _LARGE_RESPONSE_ITEMS:
            # Counting error codes and kio's writer are Python: in a worker thread the loop still
            # gets its turn every switch interval. The worker also frees the response.
            owned = [response]
            del response
            return await asyncio.to_thread(self._finish_owned, ctx, owned)
        return self._finish(ctx, response)

    def _finish_spliced(self, route: _Route, ctx: RequestContext, response: SplicedResponse) -> bytes | SplicedFrame:
        """The frame cut at the response's file regions (see `file_regions`), or, when the cut
        cannot be made unambiguously, the frame with the regions' bytes read into it."""
        built, frame = response.encode(lambda r: encode_response(r, correlation_id=ctx.correlation_id))
        if type(built) is not route.response_cls:
            raise TypeError(f"handler for {api_name(ctx.api_key)} v{ctx.api_version} returned "
                            f"{type(built).__qualname__} in its spliced response")
        if frame is None:
            logger.info("Sending %s v%d to %s:%s with its file regions copied: the frame could not be cut at them",
                        api_name(ctx.api_key), ctx.api_version, self.peer[0], self.peer[1])
            return self._finish(ctx, response.materialize())
        self.listener._count_errors(ctx.api_key, built)
        return frame

    def _finish_owned(self, ctx: RequestContext, owned: list[Any]) -> bytes:
        """`_finish` of the response in `owned`, which holds its only reference: once encoded, its
        items are freed here, a slice at a time (`large_requests.release`), not on the loop."""
        response = owned.pop()
        try:
            return self._finish(ctx, response)
        finally:
            parts = disown(response)
            del response
            release(parts)

    def _finish(self, ctx: RequestContext, response: Any) -> bytes:
        self.listener._count_errors(ctx.api_key, response)
        return encode_response(response, correlation_id=ctx.correlation_id)

    # --- writing -------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        writer = self.writer
        transport = writer.transport
        while True:
            item = await self.queue.get()
            if item is _END:
                return
            if isinstance(item, asyncio.Task):
                try:
                    frame = await item
                except asyncio.CancelledError:
                    raise
                except _Close as close:
                    self._note_close(close.reason, close.detail, level=close.level)
                    self._abort()
                    return
                except Exception as e:
                    self._note_close(CloseReason.HANDLER_ERROR, f"handler failed: {e!r}", level=logging.ERROR)
                    logger.error("Handler on listener %s raised", self.listener.name, exc_info=e)
                    self._abort()
                    return
            else:
                frame = item
            spliced = frame if isinstance(frame, SplicedFrame) else None
            if transport.is_closing():
                # The peer reset or closed the connection: one line, and no writes into the void.
                self._note_close(CloseReason.SOCKET_ERROR, "connection lost before the response was sent",
                                 level=logging.INFO)
                if spliced is not None:
                    spliced.close()
                self._abort()
                return
            large = spliced is None and len(frame) > _WRITE_CHUNK_BYTES
            if spliced is None and frame and not large:  # b"": a request answered with NO_RESPONSE keeps its place and frees its slot
                writer.write(frame)
            try:
                if spliced is not None:
                    async with asyncio.timeout(self.idle_s):
                        await self._send_spliced(spliced)
                elif large:
                    await self._send_in_chunks(frame)
                if transport.get_write_buffer_size():
                    # A peer that stops reading would stall us here forever, with its request in
                    # flight so the read side's idle timer is off. Kafka closes such a connection
                    # once connections.max.idle.ms passes without progress.
                    async with asyncio.timeout(self.idle_s):
                        await writer.drain()
            except TimeoutError:
                self._note_close(
                    CloseReason.IDLE,
                    f"peer read no response for {self.listener.connections_max_idle_ms} ms",
                    level=logging.INFO,
                )
                self._abort()
                return
            except (ConnectionError, OSError) as e:
                self._note_close(CloseReason.SOCKET_ERROR, f"socket error: {e}", level=logging.INFO)
                self._abort()
                return
            except _Close as close:
                self._note_close(close.reason, close.detail, level=close.level)
                self._abort()
                return
            finally:
                if spliced is not None:
                    spliced.close()
            if self.close_after_response is not None:
                # The refusal is delivered, then the connection ends (closed, not aborted, so the
                # transport flushes the answer first).
                self._note_close(CloseReason.AUTHENTICATION_FAILED, self.close_after_response, level=logging.INFO)
                self.aborted = True
                self._drain_queue()
                self.slots.release()
                transport.close()
                return
            self.in_flight -= 1
            self.slots.release()
            if self.in_flight == 0 and self.idle is not None and not self.idle.expired():
                with contextlib.suppress(RuntimeError):
                    self.idle.reschedule(self._idle_deadline())

    async def _send_in_chunks(self, frame: bytes) -> None:
        """Write a large frame a chunk at a time, each once the socket took the one before: the
        transport then copies at most one chunk into its buffer (a 67 MB answer written whole was
        copied there in one call of ~0.5 s on the loop). A peer that takes no chunk for
        connections.max.idle.ms is closed as idle."""
        writer = self.writer
        view = memoryview(frame)
        for start in range(0, len(view), _WRITE_CHUNK_BYTES):
            writer.write(view[start:start + _WRITE_CHUNK_BYTES])
            if writer.transport.get_write_buffer_size():
                async with asyncio.timeout(self.idle_s):
                    await writer.drain()

    async def _send_spliced(self, frame: SplicedFrame) -> None:
        """Write a spliced frame: its bytes, and each file region with the kernel's sendfile
        (loop.sendfile on the socket transport), or read and written where the transport has no
        native sendfile. A region the file no longer holds in full closes the connection."""
        writer = self.writer
        listener = self.listener
        for part in frame.parts:
            if not isinstance(part, FileRegion):
                writer.write(part)
                continue
            try:
                if listener.security.ssl_context is not None:
                    # TLS encrypts in user space: no zero-copy (as Kafka's SslTransportLayer).
                    raise asyncio.SendfileNotAvailableError("TLS connection")
                sent = await self.loop.sendfile(writer.transport, part.file, part.position, part.size, fallback=False)
                mode = "sendfile"
            except asyncio.SendfileNotAvailableError:
                data = part.read()
                writer.write(data)
                sent = len(data)
                mode = "copy"
                await writer.drain()
            except RuntimeError as e:  # the transport closed under us
                raise ConnectionError(str(e)) from e
            if sent > 0:
                listener.metrics.file_region_bytes.labels(listener.name, mode).inc(sent)
            if sent != part.size:
                raise _Close(CloseReason.SOCKET_ERROR, f"a file region of {part.size} bytes had only {sent} left to "
                             "send (the log was truncated under it)", level=logging.WARNING)

    def _abort(self) -> None:
        """End the connection from the writer's side: drop queued work, and abort the transport,
        which wakes the read loop with end-of-file and frees it if it waits for a slot."""
        self.aborted = True
        self._drain_queue()
        self.slots.release()  # a read loop waiting for a slot wakes, sees `aborted`, and ends
        self.writer.transport.abort()
