"""SASL on a Kafka connection (KIP-152): SaslHandshake, then SaslAuthenticate frames, on both sides.

Server side (`SaslAuthenticator`, one per connection of a SASL_PLAINTEXT or SASL_SSL listener):
the states of Kafka's SaslServerAuthenticator. Before authentication completes a connection may
send ApiVersions, then one SaslHandshake naming an enabled mechanism, then the SaslAuthenticate
exchange of that mechanism; any other request closes it. A failed authentication is answered
with SASL_AUTHENTICATION_FAILED after `connection.failed.authentication.delay.ms`, and the
connection is closed after that answer. Mechanisms:

- PLAIN (RFC 4616): `authzid NUL authcid NUL password`, checked against the `user_<name>`
  options of the listener's PlainLoginModule JAAS config, as Kafka's PlainServerCallbackHandler
  does; an authorization id must be empty or the user name.
- SCRAM-SHA-256/512 (`scram`), with credentials looked up by the listener's owner (the metadata
  image's UserScramCredentialRecords).

Re-authentication (KIP-368) and SaslHandshake v0's raw tokens are not served: SaslHandshake is
advertised at v1 only, which every client of the last six years prefers.

Client side (`authenticate_client`): the same exchange driven from our connections.
"""

from __future__ import annotations

import asyncio
import enum
import hmac
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from kio.schema.errors import ErrorCode

from kraft_engine.protocol.errors import KafkaProtocolError
from kraft_engine.protocol.scram import (
    SCRAM_MECHANISMS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
)

__all__ = [
    "DEFAULT_FAILED_AUTHENTICATION_DELAY_MS",
    "DEFAULT_SASL_SERVER_MAX_RECEIVE_BYTES",
    "SASL_AUTHENTICATE_KEY",
    "SASL_HANDSHAKE_KEY",
    "SaslAuthenticationFailed",
    "SaslAuthenticator",
    "SaslClientSettings",
    "SaslServerConfig",
    "SaslStateError",
    "SaslStep",
    "authenticate_client",
    "jaas_options",
]

logger = logging.getLogger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
DEFAULT_FAILED_AUTHENTICATION_DELAY_MS = 100  # connection.failed.authentication.delay.ms
DEFAULT_SASL_SERVER_MAX_RECEIVE_BYTES = 524288  # sasl.server.max.receive.size
SUPPORTED_MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS)

ScramLookup = Callable[[str, str], ScramCredential | None]
"""(mechanism name, user name) -> the user's credential, or None."""


class SaslStateError(KafkaProtocolError):
    """A request the authentication state does not allow: the connection is closed."""


class SaslAuthenticationFailed(KafkaProtocolError):
    """The client's credentials are wrong (raised on the client side)."""


# --- JAAS --------------------------------------------------------------------------------------

_JAAS_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


def jaas_options(text: str) -> tuple[str, dict[str, str]]:
    """The login module and options of a one-module `sasl.jaas.config` value, e.g.
    `org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="secret";`."""
    tokens: list[tuple[str, str]] = []
    position = 0
    stripped = text.strip()
    while position < len(stripped):
        match = _JAAS_TOKEN.match(stripped, position)
        if match is None or match.end() == position:
            raise ValueError(f"Invalid JAAS config: unexpected text at {stripped[position:position + 20]!r}")
        quoted, word, equals, semicolon = match.groups()
        if quoted is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            tokens.append(("word", word))
        elif equals is not None:
            tokens.append(("=", "="))
        elif semicolon is not None:
            tokens.append((";", ";"))
        position = match.end()
    if len(tokens) < 3 or tokens[0][0] != "word" or tokens[1][0] != "word" or tokens[-1][0] != ";":
        raise ValueError("Invalid JAAS config: expected '<LoginModule> <flag> key=value ... ;'")
    if tokens[1][1].lower() not in ("required", "requisite", "sufficient", "optional"):
        raise ValueError(f"Invalid JAAS config: invalid control flag {tokens[1][1]}")
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if len(body) % 3:
        raise ValueError("Invalid JAAS config: options must be key=value")
    for i in range(0, len(body), 3):
        key, eq, value = body[i:i + 3]
        if key[0] != "word" or eq[0] != "=" or value[0] not in ("word", "value"):
            raise ValueError(f"Invalid JAAS config: option {key[1]} must be key=value")
        options[key[1]] = value[1]
    if ";" in (t[0] for t in body):
        raise ValueError("Invalid JAAS config: only one login module may be specified")
    return tokens[0][1], options


# --- server side -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SaslServerConfig:
    """What a SASL listener authenticates with."""

    enabled_mechanisms: tuple[str, ...]
    plain_users: Mapping[str, str] = field(default_factory=dict)
    scram_credentials: ScramLookup | None = None
    failed_authentication_delay_ms: int = DEFAULT_FAILED_AUTHENTICATION_DELAY_MS
    max_receive_bytes: int = DEFAULT_SASL_SERVER_MAX_RECEIVE_BYTES

    def __post_init__(self) -> None:
        unknown = [m for m in self.enabled_mechanisms if m not in SUPPORTED_MECHANISMS]
        if unknown:
            raise ValueError(f"sasl.enabled.mechanisms: unsupported {', '.join(unknown)} "
                             f"(supported {', '.join(SUPPORTED_MECHANISMS)})")
        if not self.enabled_mechanisms:
            raise ValueError("sasl.enabled.mechanisms must name at least one mechanism on a SASL listener")


class _State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake_or_versions"
    HANDSHAKE = "handshake"
    AUTHENTICATE = "authenticate"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(slots=True)
class SaslStep:
    """A SASL request's answer: the response, and whether the connection closes after it."""

    response: Any
    close_reason: str | None = None


class SaslAuthenticator:
    """One connection's authentication (Kafka's SaslServerAuthenticator states)."""

    def __init__(self, config: SaslServerConfig, *, peer: str) -> None:
        self.config = config
        self.peer = peer
        self._state = _State.HANDSHAKE_OR_VERSIONS
        self._mechanism: str | None = None
        self._scram: ScramServer | None = None
        #: `User:<name>` once authentication completes.
        self.principal: str | None = None

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    def check_request(self, api_key: int, api_name: str) -> None:
        """Raise SaslStateError when this request may not come now."""
        from kraft_engine.protocol.entities import API_VERSIONS_KEY

        state = self._state
        if state is _State.COMPLETE:
            if api_key in (SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY):
                raise SaslStateError(f"{api_name} after authentication completed (re-authentication is not supported)")
            return
        if state is _State.HANDSHAKE_OR_VERSIONS and api_key in (API_VERSIONS_KEY, SASL_HANDSHAKE_KEY):
            return
        if state is _State.HANDSHAKE and api_key == SASL_HANDSHAKE_KEY:
            return
        if state is _State.AUTHENTICATE and api_key == SASL_AUTHENTICATE_KEY:
            return
        raise SaslStateError(f"Unexpected Kafka request of type {api_name} during SASL handshake")

    def note_api_versions(self) -> None:
        if self._state is _State.HANDSHAKE_OR_VERSIONS:
            self._state = _State.HANDSHAKE

    def handshake(self, request: Any, response_class: type[Any]) -> SaslStep:
        mechanism = str(request.mechanism)
        enabled = tuple(self.config.enabled_mechanisms)
        if mechanism not in enabled:
            self._state = _State.FAILED
            logger.info("Refusing SASL mechanism %r from %s: enabled mechanisms are %s", mechanism, self.peer, enabled)
            return SaslStep(response_class(error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=enabled),
                            close_reason=f"Unsupported SASL mechanism {mechanism}")
        self._mechanism = mechanism
        if mechanism in SCRAM_MECHANISMS:
            self._scram = ScramServer(SCRAM_MECHANISMS[mechanism])
        self._state = _State.AUTHENTICATE
        return SaslStep(response_class(error_code=ErrorCode.none, mechanisms=enabled))

    async def authenticate(self, request: Any, response_class: type[Any]) -> SaslStep:
        token = bytes(request.auth_bytes)
        try:
            if self._mechanism == "PLAIN":
                reply = self._plain(token)
            else:
                reply = self._scram_step(token)
        except (ScramError, _PlainError) as e:
            self._state = _State.FAILED
            logger.info("Failed authentication with %s (%s: %s)", self.peer, self._mechanism, e)
            # Kafka's delay: a guesser gets one answer per delay per connection it opens.
            await asyncio.sleep(self.config.failed_authentication_delay_ms / 1000)
            message = f"Authentication failed during authentication due to invalid credentials with SASL mechanism {self._mechanism}"
            return SaslStep(_authenticate_response(response_class, error_code=ErrorCode.sasl_authentication_failed,
                                                   message=message, auth_bytes=b""),
                            close_reason=f"authentication failed: {e}")
        return SaslStep(_authenticate_response(response_class, error_code=ErrorCode.none, message=None,
                                               auth_bytes=reply))

    def _plain(self, token: bytes) -> bytes:
        parts = token.split(b"\x00")
        if len(parts) != 3:
            raise _PlainError("Invalid SASL/PLAIN response: expected 3 tokens")
        try:
            authzid, username, password = (p.decode("utf-8") for p in parts)
        except UnicodeDecodeError:
            raise _PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
        if not username:
            raise _PlainError("Authentication failed: username not specified")
        if not password:
            raise _PlainError("Authentication failed: password not specified")
        expected = self.config.plain_users.get(username)


        if expected is None or not hmac.compare_digest(expected.encode(), password.encode()):
            raise _PlainError("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise _PlainError("Authentication failed: Client requested an authorization id that is different from username")
        self._complete(username)
        return b""

    def _scram_step(self, token: bytes) -> bytes:
        scram = self._scram
        if scram is None:
            raise ScramError("no SCRAM exchange in progress")
        if scram.username is None:
            username = scram.client_first(token)
            lookup = self.config.scram_credentials
            credential = lookup(scram.mechanism.name, username) if lookup is not None else None
            if credential is None:
                raise ScramError("Authentication failed: Invalid user credentials")
            return scram.server_first(credential)
        reply = scram.final(token)
        self._complete(scram.username)
        return reply

    def _complete(self, username: str) -> None:
        self._state = _State.COMPLETE
        self.principal = f"User:{username}"


class _PlainError(KafkaProtocolError, ValueError):
    pass


def _authenticate_response(cls: type[Any], *, error_code: ErrorCode, message: str | None, auth_bytes: bytes) -> Any:
    if cls.__version__ >= 1:
        return cls(error_code=error_code, error_message=message, auth_bytes=auth_bytes,
                   session_lifetime=timedelta(0))
    return cls(error_code=error_code, error_message=message, auth_bytes=auth_bytes)


# --- client side -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SaslClientSettings:
    """`sasl.mechanism` and the user and password of `sasl.jaas.config`."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if self.mechanism not in SUPPORTED_MECHANISMS:
            raise ValueError(f"sasl.mechanism: unsupported {self.mechanism} (supported {', '.join(SUPPORTED_MECHANISMS)})")


Exchange = Callable[[Any], Awaitable[Any]]


async def authenticate_client(settings: SaslClientSettings, *, exchange: Exchange, negotiated: Callable[[int], int],
                              where: str) -> None:
    """Run SaslHandshake and SaslAuthenticate through `exchange` (send a request, await its
    response). Raises SaslAuthenticationFailed with the server's message."""
    from kraft_engine.protocol.entities import request_class

    handshake = await exchange(request_class(SASL_HANDSHAKE_KEY, negotiated(SASL_HANDSHAKE_KEY))(
        mechanism=settings.mechanism))
    if handshake.error_code != ErrorCode.none:
        raise SaslAuthenticationFailed(
            f"{where} refused SASL mechanism {settings.mechanism}: {ErrorCode(handshake.error_code).name.upper()} "
            f"(enabled: {', '.join(handshake.mechanisms)})")
    version = negotiated(SASL_AUTHENTICATE_KEY)
    cls = request_class(SASL_AUTHENTICATE_KEY, version)

    async def step(token: bytes) -> bytes:
        response = await exchange(cls(auth_bytes=token))
        if response.error_code != ErrorCode.none:
            raise SaslAuthenticationFailed(f"{where}: {ErrorCode(response.error_code).name.upper()}: {response.error_message}")
        return bytes(response.auth_bytes)

    if settings.mechanism == "PLAIN":
        await step(b"\x00" + settings.username.encode() + b"\x00" + settings.password.encode())
        return
    client = ScramClient(SCRAM_MECHANISMS[settings.mechanism], username=settings.username, password=settings.password)
    try:
        server_first = await step(client.first())
        server_final = await step(client.final(server_first))
        client.verify(server_final)
    except ScramError as e:
        raise SaslAuthenticationFailed(f"{where}: {e}") from e



