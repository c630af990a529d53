"""A listener's and a client's security, read from Kafka's keys.

A listener's security protocol comes from `listener.security.protocol.map`; SSL and SASL_SSL
listeners speak TLS (`tls`), SASL_PLAINTEXT and SASL_SSL authenticate with SASL (`sasl`). Every
key may be overridden for one listener with Kafka's prefix `listener.name.<listener, lower
case>.` (and, for `sasl.jaas.config`, `listener.name.<listener>.<mechanism, lower case>.`).

The engine's own connections (a broker to a controller or another broker, a controller to
another controller, the tools with `--command-config`) are clients: `client_security` reads
`security.protocol`, `ssl.*`, `sasl.mechanism` and `sasl.jaas.config` as Kafka's clients do, and
`listener_client_security` reads what a node uses to reach one of its own listeners (the
listener's `ssl.*`, the mechanism of `sasl.mechanism.inter.broker.protocol` or
`sasl.mechanism.controller.protocol`, and the user and password of that mechanism's JAAS config).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from kraft_engine.protocol.errors import KafkaProtocolError
from kraft_engine.protocol.principal_mapping import SslPrincipalMapper
from kraft_engine.protocol.sasl import (
    DEFAULT_FAILED_AUTHENTICATION_DELAY_MS,
    DEFAULT_SASL_SERVER_MAX_RECEIVE_BYTES,
    SaslClientSettings,
    SaslServerConfig,
    ScramLookup,
    jaas_options,
)
from kraft_engine.protocol.tls import TlsConfigError, client_context, server_context, tls_settings

__all__ = [
    "DEFAULT_SASL_HANDSHAKE_TIMEOUT_MS",
    "SECURITY_KEYS",
    "SECURITY_PROTOCOLS",
    "ClientSecurity",
    "ListenerSecurity",
    "SecurityConfigError",
    "client_security",
    "listener_client_security",
    "listener_security",
    "is_security_key",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_SASL_HANDSHAKE_TIMEOUT_MS = 10000
"""`kraftwerk.sasl.handshake.timeout.ms`: how long a connection may take from accept until it is
authenticated (TLS handshake included). Kafka has no such key (its idle timeout applies); ours
keeps an unauthenticated connection from holding a slot for `connections.max.idle.ms`."""


SECURITY_KEYS = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.type", "ssl.truststore.location",
    "ssl.truststore.password", "ssl.truststore.certificates", "ssl.client.auth", "ssl.enabled.protocols",
    "ssl.endpoint.identification.algorithm", "ssl.cipher.suites", "ssl.principal.mapping.rules",
    "sasl.enabled.mechanisms", "sasl.jaas.config", "sasl.mechanism.inter.broker.protocol",
    "sasl.mechanism.controller.protocol", "sasl.server.max.receive.size",
    "connection.failed.authentication.delay.ms", "kraftwerk.sasl.handshake.timeout.ms",
})
"""The keys read here: a node's config knows them, bare or under `listener.name.<listener>.`."""
_LISTENER_KEY = re.compile(r"listener\.name\.[^.]+\.(?:(?:plain|scram-sha-256|scram-sha-512)\.)?(?P<key>.+)")


def is_security_key(key: str) -> bool:
    if key in SECURITY_KEYS:
        return True
    match = _LISTENER_KEY.fullmatch(key)
    return match is not None and match.group("key") in SECURITY_KEYS


class SecurityConfigError(KafkaProtocolError, ValueError):
    """Security keys that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How a listener protects its connections."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    principal_mapper: SslPrincipalMapper | None = None
    sasl: SaslServerConfig | None = None
    handshake_timeout_ms: int = DEFAULT_SASL_HANDSHAKE_TIMEOUT_MS


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How a client connection protects itself."""

    security_protocol: str = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslClientSettings | None = None


def _uses_tls(protocol: str) -> bool:
    return protocol in ("SSL", "SASL_SSL")


def _uses_sasl(protocol: str) -> bool:
    return protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def _check_protocol(protocol: str, key: str) -> str:
    protocol = protocol.strip().upper()
    if protocol not in SECURITY_PROTOCOLS:
        raise SecurityConfigError(f"Invalid value {protocol} for configuration {key}: expected one of "
                                  f"{', '.join(SECURITY_PROTOCOLS)}")
    return protocol


def _prefix(listener_name: str) -> str:
    return f"listener.name.{listener_name.lower()}."


def _get(props: Mapping[str, str], key: str, listener_name: str) -> str | None:
    value = props.get(_prefix(listener_name) + key)
    return props.get(key) if value is None else value


def _mechanisms(props: Mapping[str, str], listener_name: str) -> tuple[str, ...]:
    text = _get(props, "sasl.enabled.mechanisms", listener_name)
    return tuple(m.strip().upper() for m in (text if text is not None else "GSSAPI").split(",") if m.strip())


def _jaas(props: Mapping[str, str], listener_name: str, mechanism: str) -> dict[str, str] | None:
    """The options of the JAAS config Kafka reads for this listener and mechanism."""
    text = props.get(f"{_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config")
    if text is None:
        text = props.get(f"{_prefix(listener_name)}sasl.jaas.config", props.get("sasl.jaas.config"))
    if text is None:
        return None
    try:
        return jaas_options(text)[1]
    except ValueError as e:
        raise SecurityConfigError(f"{_prefix(listener_name)}{mechanism.lower()}.sasl.jaas.config: {e}") from None


def _int(props: Mapping[str, str], key: str, default: int, listener_name: str) -> int:
    text = _get(props, key, listener_name)
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        raise SecurityConfigError(f"Invalid value {text} for configuration {key}: not a number") from None


def listener_security(props: Mapping[str, str], *, listener_name: str, security_protocol: str,
                      scram_credentials: ScramLookup | None = None) -> ListenerSecurity:
    """A listener's security from a node's config (its `originals`)."""
    protocol = _check_protocol(security_protocol, "listener.security.protocol.map")
    handshake_timeout_ms = _int(props, "kraftwerk.sasl.handshake.timeout.ms", DEFAULT_SASL_HANDSHAKE_TIMEOUT_MS,
                                listener_name)
    if handshake_timeout_ms <= 0:
        raise SecurityConfigError("kraftwerk.sasl.handshake.timeout.ms must be positive")
    context = None
    mapper = None
    try:
        if _uses_tls(protocol):
            context = server_context(tls_settings(props, prefix=_prefix(listener_name)))
            mapper = SslPrincipalMapper(_get(props, "ssl.principal.mapping.rules", listener_name) or "DEFAULT")
    except (TlsConfigError, ValueError) as e:
        raise SecurityConfigError(f"listener {listener_name}: {e}") from None
    sasl = None
    if _uses_sasl(protocol):
        mechanisms = _mechanisms(props, listener_name)
        plain_users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            options = _jaas(props, listener_name, "PLAIN")
            if options is None:
                raise SecurityConfigError(f"listener {listener_name}: PLAIN is enabled but no "
                                          f"{_prefix(listener_name)}plain.sasl.jaas.config is set")
            plain_users = {k[len("user_"):]: v for k, v in options.items() if k.startswith("user_")}
        try:
            sasl = SaslServerConfig(
                enabled_mechanisms=mechanisms,
                plain_users=plain_users,
                scram_credentials=scram_credentials,
                failed_authentication_delay_ms=_int(props, "connection.failed.authentication.delay.ms",
                                                    DEFAULT_FAILED_AUTHENTICATION_DELAY_MS, listener_name),
                max_receive_bytes=_int(props, "sasl.server.max.receive.size", DEFAULT_SASL_SERVER_MAX_RECEIVE_BYTES,
                                       listener_name),
            )
        except ValueError as e:
            raise SecurityConfigError(f"listener {listener_name}: {e}") from None
    return ListenerSecurity(security_protocol=protocol, ssl_context=context, principal_mapper=mapper, sasl=sasl,
                            handshake_timeout_ms=handshake_timeout_ms)


def listener_client_security(props: Mapping[str, str], *, listener_name: str, security_protocol: str,
                             mechanism_key: str) -> ClientSecurity:
    """What a node uses to connect to `listener_name` of another node: the listener's own
    `ssl.*` (its keystore is this node's certificate for mTLS) and, on a SASL listener, the
    mechanism `mechanism_key` names (`sasl.mechanism.inter.broker.protocol` or
    `sasl.mechanism.controller.protocol`) with the username and password of its JAAS config."""
    protocol = _check_protocol(security_protocol, "listener.security.protocol.map")
    context = None
    if _uses_tls(protocol):
        try:
            context = client_context(tls_settings(props, prefix=_prefix(listener_name)))
        except (TlsConfigError, ValueError) as e:
            raise SecurityConfigError(f"listener {listener_name}: {e}") from None
    sasl = None
    if _uses_sasl(protocol):
        mechanism = (props.get(mechanism_key) or "GSSAPI").strip().upper()
        options = _jaas(props, listener_name, mechanism)
        if options is None or "username" not in options or "password" not in options:
            raise SecurityConfigError(f"{mechanism_key}={mechanism}: {_prefix(listener_name)}{mechanism.lower()}."
                                      "sasl.jaas.config must give this node's username and password")
        try:
            sasl = SaslClientSettings(mechanism=mechanism, username=options["username"], password=options["password"])
        except ValueError as e:
            raise SecurityConfigError(f"{mechanism_key}: {e}") from None
    return ClientSecurity(security_protocol=protocol, ssl_context=context, sasl=sasl)


def client_security(props: Mapping[str, str]) -> ClientSecurity:
    """A Kafka client's security keys (`--command-config` of the tools)."""
    protocol = _check_protocol(props.get("security.protocol", "PLAINTEXT"), "security.protocol")
    context = None
    if _uses_tls(protocol):
        try:
            context = client_context(tls_settings(props))
        except (TlsConfigError, ValueError) as e:
            raise SecurityConfigError(str(e)) from None
    sasl = None
    if _uses_sasl(protocol):
        mechanism = (props.get("sasl.mechanism") or "GSSAPI").strip().upper()
        text = props.get("sasl.jaas.config")
        if text is None:
            raise SecurityConfigError("security.protocol is SASL but sasl.jaas.config is not set")
        try:
            options = jaas_options(text)[1]
            sasl = SaslClientSettings(mechanism=mechanism, username=options.get("username", ""),
                                      password=options.get("password", ""))
        except ValueError as e:
            raise SecurityConfigError(f"sasl.jaas.config: {e}") from None
    return ClientSecurity(security_protocol=protocol, ssl_context=context, sasl=sasl)
