"""An asyncio client connection to one Kafka node: correlation ids, pipelining, timeouts,
reconnect with backoff, and version negotiation through ApiVersions.

This is what the raft driver, the broker's lifecycle manager and the operator's admin client use
to talk to a node. It mirrors Kafka's `NetworkClient` where behaviour is visible on the wire:

- Every connection starts with ApiVersions at the newest version we speak. A node that does not
  speak it answers UNSUPPORTED_VERSION with its own range (always in a v0 body), and we retry
  at the highest common version. The node's ranges then decide `negotiated_version(api_key)`.
- Many requests may be in flight; responses are matched by correlation id.
- A request that gets no answer within its timeout fails with `RequestTimedOut`; its correlation
  id is remembered so that a late answer is recognised and discarded rather than treated as a
  protocol violation. (Kafka's Java client disconnects instead; keeping the connection avoids a
  reconnect storm against a slow-but-healthy controller.)
- A failed connection attempt delays the next by `reconnect.backoff.ms`, growing exponentially
  with jitter up to `reconnect.backoff.max.ms`.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import logging
import random
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from kraft_engine.invariant import InvariantViolation
from kraft_engine.protocol.backoff import ExponentialBackoff
from kraft_engine.protocol.entities import (
    API_VERSIONS_KEY,
    api_name,
    kio_version_range,
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
from kraft_engine.protocol.framing import (
    SIZE_PREFIX,
    decode_response,
    encode_request,
    response_correlation_id,
)
from kraft_engine.protocol.sasl import authenticate_client
from kraft_engine.protocol.security import ClientSecurity

__all__ = ["ConnectionConfig", "KafkaConnection"]

logger = logging.getLogger(__name__)

try:
    _SOFTWARE_VERSION = importlib.metadata.version("kraftwerk")
except importlib.metadata.PackageNotFoundError:  # running from a source tree without install
    _SOFTWARE_VERSION = "0.0.0"

_INT32_MAX = 2**31 - 1
_ERROR_CODE_AFTER_HEADER_V0 = struct.Struct(">4xh")
# Correlation ids of timed-out requests we still recognise. Bounded so a peer that never
# answers cannot grow it forever; the oldest are forgotten first.
_ABANDONED_MAX = 4096


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    """Client settings, named after Kafka's client configs (with their defaults)."""

    client_id: str | None = "kraft-engine"
    client_software_name: str = "kraft-engine"
    client_software_version: str = _SOFTWARE_VERSION
    request_timeout_ms: int = 30000  # request.timeout.ms
    socket_connection_setup_timeout_ms: int = 10000  # socket.connection.setup.timeout.ms
    reconnect_backoff_ms: int = 50  # reconnect.backoff.ms
    reconnect_backoff_max_ms: int = 1000  # reconnect.backoff.max.ms
    receive_max_bytes: int = 104857600  # largest response frame we accept
    security: ClientSecurity | None = None  # security.protocol, ssl.*, sasl.* (PLAINTEXT when None)


@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[Any]
    response_cls: type[Any]


class KafkaConnection:
    """A connection to one node at (host, port). Reconnects on demand, with backoff."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        config: ConnectionConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.config = config or ConnectionConfig()
        self._rng = rng or random.Random()
        self._backoff = ExponentialBackoff(
            initial_ms=self.config.reconnect_backoff_ms, max_ms=self.config.reconnect_backoff_max_ms
        )
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._pending: dict[int, _Pending] = {}
        self._abandoned: dict[int, None] = {}  # insertion-ordered set
        self._next_correlation_id = 0
        self._connect_lock = asyncio.Lock()
        self._closed = False
        #: Consecutive failed connection attempts since the last successful one.
        self.connect_failures = 0
        #: The error of the last failed attempt, for messages.
        self.last_connect_error: BaseException | None = None
        self._next_attempt_at = 0.0  # loop time before which no new attempt is made
        #: The backoff applied after the last failure, in ms (for observation and tests).
        self.last_backoff_ms = 0
        self._peer_versions: dict[int, tuple[int, int]] = {}
        #: The peer's full ApiVersions response of the current connection (features included).
        self.api_versions_response: Any = None

    def __repr__(self) -> str:
        state = "connected" if self.connected else "disconnected"
        return f"<KafkaConnection {self.host}:{self.port} {state}>"

    # --- state ---------------------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self._writer is not None

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    @property
    def peer_api_versions(self) -> Mapping[int, tuple[int, int]]:
        """The (min, max) versions per api key the peer advertised on the current connection."""
        return self._peer_versions

    def ready_in_ms(self) -> int:
        """How long until a connection attempt is allowed (0 when connected or allowed now)."""
        if self.connected:
            return 0
        delay_s = self._next_attempt_at - asyncio.get_running_loop().time()
        return max(0, int(delay_s * 1000))

    def negotiated_version(self, api_key: int) -> int:
        """The highest version of `api_key` both we (kio) and the connected peer speak.

        Raises UnsupportedApi when the peer does not serve the api, UnsupportedVersion when the
        ranges do not meet, and ConnectionLost when not connected (connect() first).
        """
        if not self._peer_versions:
            raise ConnectionLost(f"not connected to {self.host}:{self.port}; versions are unknown")
        theirs = self._peer_versions.get(api_key)
        if theirs is None:
            raise UnsupportedApi(
                f"{self.host}:{self.port} does not serve {api_name(api_key)} (api key {api_key})"
            )
        ours = kio_version_range(api_key)
        if ours is None:
            raise UnsupportedApi(f"we do not speak api key {api_key}")
        low, high = max(ours[0], theirs[0]), min(ours[1], theirs[1])
        if low > high:
            raise UnsupportedVersion(
                f"{api_name(api_key)}: {self.host}:{self.port} serves versions {theirs[0]}..{theirs[1]}, "
                f"we speak {ours[0]}..{ours[1]}"
            )
        return high

    # --- connecting ----------------------------------------------------------------------------

    async def connect(self, *, timeout_ms: int | None = None) -> None:
        """Connect (and negotiate versions), retrying with backoff until `timeout_ms`
        (default request.timeout.ms). Raises ConnectionFailed with the last error."""
        loop = asyncio.get_running_loop()
        budget_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        deadline = loop.time() + budget_ms / 1000
        while not await self.try_connect(deadline=deadline):
            if loop.time() >= deadline or self._closed:
                raise ConnectionFailed(
                    f"could not connect to {self.host}:{self.port} within {budget_ms} ms "
                    f"after {self.connect_failures} attempts: {self.last_connect_error!r}"
                ) from self.last_connect_error

    async def try_connect(self, *, deadline: float | None = None) -> bool:
        """One connection attempt, after waiting out the backoff (unless that passes
        `deadline`, a loop time). True when connected, False when it failed in a way a retry
        may fix; raises ConnectionFailed when the node refused the handshake."""
        if self._closed:
            raise ConnectionFailed(f"connection to {self.host}:{self.port} was closed")
        async with self._connect_lock:
            if self.connected:
                return True
            loop = asyncio.get_running_loop()
            wait_s = self._next_attempt_at - loop.time()
            if wait_s > 0:
                if deadline is not None and loop.time() + wait_s > deadline:
                    await asyncio.sleep(max(0.0, deadline - loop.time()))
                    return False
                await asyncio.sleep(wait_s)
            setup_s = self.config.socket_connection_setup_timeout_ms / 1000
            if deadline is not None:
                setup_s = max(0.0, min(setup_s, deadline - loop.time()))
            try:
                async with asyncio.timeout(setup_s):
                    await self._open()
            except (OSError, TimeoutError, MalformedFrame) as e:
                # Refused, reset, silent or garbled: the node may be restarting; retry later.
                await self._fail_attempt(e)
                return False
            except KafkaProtocolError as e:
                # The node answered the handshake and said no (no common ApiVersions version,
                # or an error code): retrying cannot change its answer.
                await self._fail_attempt(e)
                raise ConnectionFailed(f"connection to {self.host}:{self.port} refused: {e}") from e
            self.connect_failures = 0
            self.last_connect_error = None
            return True

    async def _fail_attempt(self, error: BaseException) -> None:
        # The attempt's socket is closed before the attempt counts as failed: a graceful close of a
        # TLS connection waits for the peer's close_notify (a node that refused a SASL login
        # answers only after connection.failed.authentication.delay.ms), and an event loop that
        # ends first (a tool's asyncio.run) would leave the socket to the garbage collector.
        writer = self._teardown(
            ConnectionLost(f"connection setup to {self.host}:{self.port} failed: {error!r}"), abort=True
        )
        self.last_backoff_ms = self._backoff.backoff_ms(self.connect_failures, rng=self._rng)
        self.connect_failures += 1
        self.last_connect_error = error
        self._next_attempt_at = asyncio.get_running_loop().time() + self.last_backoff_ms / 1000
        logger.debug(
            "Connection to %s:%s failed (%r); next attempt in %d ms",
            self.host, self.port, error, self.last_backoff_ms,
        )
        if writer is not None:
            await _closed(writer)

    async def _open(self) -> None:
        if self._writer is not None:
            replaced = self._teardown(ConnectionLost(f"connection to {self.host}:{self.port} was replaced"), abort=True)
            if replaced is not None:
                await _closed(replaced)
        security = self.config.security
        context = security.ssl_context if security is not None else None
        if context is None:
            reader, writer = await asyncio.open_connection(self.host, self.port)
        else:
            reader, writer = await asyncio.open_connection(
                self.host, self.port, ssl=context, server_hostname=self.host,
                ssl_handshake_timeout=self.config.socket_connection_setup_timeout_ms / 1000)
        self._writer = writer
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop(reader, writer))
        await self._negotiate()
        if security is not None and security.sasl is not None:
            await authenticate_client(
                security.sasl, exchange=lambda request: self._exchange(request, timeout_ms=self.config.request_timeout_ms),
                negotiated=self.negotiated_version, where=f"{self.host}:{self.port}")

    async def _negotiate(self) -> None:
        ours = kio_version_range(API_VERSIONS_KEY)
        if ours is None:
            raise InvariantViolation("kio lacks ApiVersions")
        version = ours[1]
        while True:
            cls = request_class(API_VERSIONS_KEY, version)
            if version >= 3:
                request = cls(
                    client_software_name=self.config.client_software_name,
                    client_software_version=self.config.client_software_version,
                )
            else:
                request = cls()
            response = await self._exchange(request, timeout_ms=self.config.request_timeout_ms)
            if response.error_code == ErrorCode.unsupported_version:
                theirs = [k for k in response.api_keys if k.api_key == API_VERSIONS_KEY]
                lower = min(version - 1, theirs[0].max_version) if theirs else version - 1
                if lower < ours[0]:
                    raise UnsupportedVersion(f"{self.host}:{self.port} speaks no ApiVersions version we speak")
                version = lower
                continue
            if response.error_code != ErrorCode.none:
                raise KafkaProtocolError(
                    f"ApiVersions to {self.host}:{self.port} failed: {ErrorCode(response.error_code).name}"
                )
            self._peer_versions = {
                int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys
            }
            self.api_versions_response = response
            return

    # --- sending -------------------------------------------------------------------------------

    async def send(self, request: Any, *, timeout_ms: int | None = None) -> Any:
        """Send a kio request entity and return its response entity.

        Connects first if needed (within the same timeout). The header version follows from the
        request's class. Raises UnsupportedApi / UnsupportedVersion when the peer does not serve
        this api or version, RequestTimedOut, ConnectionFailed or ConnectionLost.
        """
        budget_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        await self._ready_for(request, timeout_ms=budget_ms)
        return await self._exchange(request, timeout_ms=budget_ms)

    async def send_without_response(self, request: Any, *, timeout_ms: int | None = None) -> None:
        """Send a request the peer answers with nothing (Produce with acks=0): written and
        drained, no correlation kept. The same checks and errors as `send`, except that a
        refusal by the peer is never seen, as with Kafka's clients."""
        budget_ms = self.config.request_timeout_ms if timeout_ms is None else timeout_ms
        await self._ready_for(request, timeout_ms=budget_ms)
        writer = self._writer
        if writer is None:
            raise ConnectionLost(f"not connected to {self.host}:{self.port}")
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == _INT32_MAX else correlation_id + 1
        writer.write(encode_request(request, correlation_id=correlation_id, client_id=self.config.client_id))
        try:
            async with asyncio.timeout(budget_ms / 1000):
                await writer.drain()
        except TimeoutError:
            raise RequestTimedOut(f"{api_name(type(request).__api_key__)} to {self.host}:{self.port} "
                                  f"not written within {budget_ms} ms") from None
        except (ConnectionError, OSError) as e:
            raise ConnectionLost(f"connection to {self.host}:{self.port} failed: {e!r}") from e

    async def _ready_for(self, request: Any, *, timeout_ms: int) -> None:
        """Connected, and the peer serves the request's api at its version."""
        if not self.connected:
            await self.connect(timeout_ms=timeout_ms)
        cls = type(request)
        api_key, version = int(cls.__api_key__), int(cls.__version__)
        if api_key != API_VERSIONS_KEY:
            theirs = self._peer_versions.get(api_key)
            if theirs is None:
                raise UnsupportedApi(
                    f"{self.host}:{self.port} does not serve {api_name(api_key)} (api key {api_key})"
                )
            if not theirs[0] <= version <= theirs[1]:
                raise UnsupportedVersion(
                    f"{self.host}:{self.port} serves {api_name(api_key)} versions {theirs[0]}..{theirs[1]}, "
                    f"not {version}"
                )

    async def _exchange(self, request: Any, *, timeout_ms: int) -> Any:
        writer = self._writer
        if writer is None:
            raise ConnectionLost(f"not connected to {self.host}:{self.port}")
        cls = type(request)
        correlation_id = self._next_correlation_id
        self._next_correlation_id = 0 if correlation_id == _INT32_MAX else correlation_id + 1
        frame = encode_request(request, correlation_id=correlation_id, client_id=self.config.client_id)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = _Pending(future, response_class(cls.__api_key__, cls.__version__))
        writer.write(frame)
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await writer.drain()
                return await future
        except TimeoutError:
            if self._pending.pop(correlation_id, None) is not None:
                self._abandon(correlation_id)
            raise RequestTimedOut(
                f"{api_name(cls.__api_key__)} v{cls.__version__} to {self.host}:{self.port} "
                f"got no response within {timeout_ms} ms"
            ) from None
        except (ConnectionError, OSError) as e:
            self._pending.pop(correlation_id, None)
            if isinstance(e, ConnectionLost):
                raise
            raise ConnectionLost(f"connection to {self.host}:{self.port} failed: {e!r}") from e
        except asyncio.CancelledError:
            if self._pending.pop(correlation_id, None) is not None:
                self._abandon(correlation_id)
            raise

    def _abandon(self, correlation_id: int) -> None:
        self._abandoned[correlation_id] = None
        if len(self._abandoned) > _ABANDONED_MAX:
            del self._abandoned[next(iter(self._abandoned))]

    # --- receiving -----------------------------------------------------------------------------

    async def _read_loop(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        error: BaseException
        try:
            while True:
                prefix = await reader.readexactly(4)
                (size,) = SIZE_PREFIX.unpack(prefix)
                if not 0 <= size <= self.config.receive_max_bytes:
                    raise MalformedFrame(f"response size {size} is invalid or too large")
                self._deliver(await reader.readexactly(size))
        except asyncio.IncompleteReadError:
            error = ConnectionLost(f"{self.host}:{self.port} closed the connection")
        except asyncio.CancelledError:
            # From _teardown, the writer is its caller's to close and await; from elsewhere (the
            # event loop is ending), the socket goes now.
            if self._writer is writer:
                writer.transport.abort()
            return
        except (OSError, KafkaProtocolError) as e:
            error = ConnectionLost(f"connection to {self.host}:{self.port} failed: {e}")
            error.__cause__ = e
            logger.warning("Closing connection to %s:%s: %s", self.host, self.port, e)
        # The connection is dead: its socket is closed now, not after a TLS close_notify exchange
        # with a peer that is gone, and the task ends once it is (disconnect() awaits the task).
        writer.transport.abort()
        if self._writer is writer:
            self._writer = None
            self._fail_pending(error)
            self._peer_versions = {}
            self.api_versions_response = None
        await _closed(writer)

    def _deliver(self, frame: bytes) -> None:
        correlation_id = response_correlation_id(frame)
        pending = self._pending.pop(correlation_id, None)
        if pending is None:
            if correlation_id in self._abandoned:
                del self._abandoned[correlation_id]
                return  # the answer to a request that already timed out
            raise MalformedFrame(f"response with unknown correlation id {correlation_id}")
        cls = pending.response_cls
        if cls.__api_key__ == API_VERSIONS_KEY and cls.__version__ != 0 and len(frame) >= 6:
            # A node that does not speak our ApiVersions version answers in a v0 body.
            (code,) = _ERROR_CODE_AFTER_HEADER_V0.unpack_from(frame, 0)
            if code == ErrorCode.unsupported_version:
                cls = response_class(API_VERSIONS_KEY, 0)
        try:
            response = decode_response(frame, cls)
        except MalformedFrame as e:
            if not pending.future.done():
                pending.future.set_exception(e)
            raise
        if not pending.future.done():
            pending.future.set_result(response)

    def _fail_pending(self, error: BaseException) -> None:
        pending, self._pending = self._pending, {}
        for item in pending.values():
            if not item.future.done():
                item.future.set_exception(error)

    # --- closing -------------------------------------------------------------------------------

    def _teardown(self, error: BaseException, *, abort: bool = False) -> asyncio.StreamWriter | None:
        """Forget the connection, failing what is in flight; its writer (closed, or aborted: the
        socket goes without a TLS close_notify exchange) is returned for the caller to await."""
        writer, self._writer = self._writer, None
        read_task, self._read_task = self._read_task, None
        if read_task is not None and not read_task.done():
            read_task.cancel()
        if writer is not None:
            if abort:
                writer.transport.abort()
            else:
                writer.close()
        self._fail_pending(error)
        self._peer_versions = {}
        self.api_versions_response = None
        return writer

    async def disconnect(self) -> None:
        """Close the socket (failing in-flight requests); a later send reconnects."""
        writer, read_task = self._writer, self._read_task
        self._teardown(ConnectionLost(f"connection to {self.host}:{self.port} was closed"))
        if read_task is not None:
            with contextlib.suppress(BaseException):
                await read_task
        if writer is not None:
            await _closed(writer)

    async def close(self) -> None:
        """Close for good: no reconnects afterwards."""
        self._closed = True
        await self.disconnect()

    async def __aenter__(self) -> KafkaConnection:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


async def _closed(writer: asyncio.StreamWriter) -> None:
    """Until the writer's socket is closed (however the connection ended)."""
    with contextlib.suppress(Exception):
        await writer.wait_closed()
