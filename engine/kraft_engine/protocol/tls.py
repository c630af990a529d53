"""TLS contexts for listeners and client connections, built from Kafka's `ssl.*` keys.

Kafka configures TLS with keystores and truststores; Python's `ssl` takes PEM files. This module
reads what Kafka's `DefaultSslEngineFactory` reads, with the same keys, and builds the
`ssl.SSLContext` the listener (server side) or the connection (client side) hands to asyncio:

- `ssl.keystore.type=PEM` with the certificate chain and key inline (`ssl.keystore.certificate.chain`,
  `ssl.keystore.key`) or in a file (`ssl.keystore.location`, certificate chain and key in one
  file), with `ssl.key.password` for an encrypted key;
- `ssl.keystore.type=PKCS12` (the default here, as JKS cannot be read without Java) with
  `ssl.keystore.location` and `ssl.keystore.password`, read with the `cryptography` library;
- `ssl.truststore.type=PEM` (`ssl.truststore.certificates` inline or `ssl.truststore.location`)
  or `PKCS12` (the certificates of the store are trusted);
- `ssl.client.auth` (`none`, `requested`, `required`) on the server side;
- `ssl.enabled.protocols` (TLSv1.2 and TLSv1.3, Kafka's default) and
  `ssl.endpoint.identification.algorithm` (`https`, Kafka's default: the server's certificate
  must name the host the client dialled; empty turns the check off) on the client side.

`ssl` loads a certificate chain and key only from a file, so inline PEM and PKCS12 material is
written to a private temporary directory (mode 0700), loaded and removed at once.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from kraft_engine.protocol.errors import KafkaProtocolError

__all__ = [
    "ClientAuth",
    "TlsConfigError",
    "TlsSettings",
    "client_context",
    "server_context",
    "tls_settings",
]


class TlsConfigError(KafkaProtocolError, ValueError):
    """`ssl.*` settings that cannot make a TLS context; the message names the key."""


class ClientAuth(StrEnum):
    """`ssl.client.auth`."""

    NONE = "none"
    REQUESTED = "requested"
    REQUIRED = "required"


_PROTOCOLS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_STORE_TYPES = ("PEM", "PKCS12")


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The `ssl.*` keys that shape a TLS context, read (`tls_settings`) but not yet loaded."""

    keystore_type: str = "PKCS12"
    keystore_location: str | None = None
    keystore_password: str | None = None
    key_password: str | None = None
    keystore_certificate_chain: str | None = None
    keystore_key: str | None = None
    truststore_type: str = "PKCS12"
    truststore_location: str | None = None
    truststore_password: str | None = None
    truststore_certificates: str | None = None
    client_auth: ClientAuth = ClientAuth.NONE
    enabled_protocols: tuple[str, ...] = ("TLSv1.2", "TLSv1.3")
    endpoint_identification_algorithm: str = "https"
    cipher_suites: tuple[str, ...] = ()

    @property
    def has_keystore(self) -> bool:
        return bool(self.keystore_location or self.keystore_certificate_chain)

    @property
    def has_truststore(self) -> bool:
        return bool(self.truststore_location or self.truststore_certificates)


def tls_settings(props: Mapping[str, str], *, prefix: str = "") -> TlsSettings:
    """The `ssl.*` keys of `props`; a key under `prefix` (`listener.name.ssl.`) wins over the
    bare key, as Kafka's per-listener overrides do."""

    def get(key: str) -> str | None:
        value = props.get(prefix + key) if prefix else None
        if value is None:
            value = props.get(key)
        return value if value is None else value.strip()

    def csv(key: str) -> tuple[str, ...] | None:
        text = get(key)
        return None if text is None else tuple(v.strip() for v in text.split(",") if v.strip())

    keystore_type = (get("ssl.keystore.type") or "").upper() or None
    truststore_type = (get("ssl.truststore.type") or "").upper() or None
    chain, key = get("ssl.keystore.certificate.chain"), get("ssl.keystore.key")
    certificates = get("ssl.truststore.certificates")
    # Kafka infers PEM when the material is inline; a location without a type is Kafka's JKS
    # default, which only Java reads, so PKCS12 stands in (`cryptography` reads it).
    keystore_type = keystore_type or ("PEM" if chain or key else "PKCS12")
    truststore_type = truststore_type or ("PEM" if certificates else "PKCS12")
    for name, value in (("ssl.keystore.type", keystore_type), ("ssl.truststore.type", truststore_type)):
        if value not in _STORE_TYPES:
            raise TlsConfigError(f"Invalid value {value} for configuration {name}: supported types are "
                                 f"{', '.join(_STORE_TYPES)} (JKS needs Java)")
    client_auth_text = (get("ssl.client.auth") or "none").lower()
    try:
        client_auth = ClientAuth(client_auth_text)
    except ValueError:
        raise TlsConfigError(f"Invalid value {client_auth_text} for configuration ssl.client.auth: "
                             "expected one of none, requested, required") from None
    protocols = csv("ssl.enabled.protocols") or ("TLSv1.2", "TLSv1.3")
    unknown = [p for p in protocols if p not in _PROTOCOLS]
    if unknown:
        raise TlsConfigError(f"Invalid value {','.join(protocols)} for configuration ssl.enabled.protocols: "
                             f"unsupported {', '.join(unknown)} (supported {', '.join(_PROTOCOLS)})")
    if (chain is None) != (key is None):
        raise TlsConfigError("ssl.keystore.certificate.chain and ssl.keystore.key must be set together")
    if (chain or key) and get("ssl.keystore.location"):
        raise TlsConfigError("ssl.keystore.location cannot be set with ssl.keystore.certificate.chain")
    if (chain or key) and keystore_type != "PEM":
        raise TlsConfigError("ssl.keystore.certificate.chain needs ssl.keystore.type=PEM")
    if certificates and truststore_type != "PEM":
        raise TlsConfigError("ssl.truststore.certificates needs ssl.truststore.type=PEM")
    algorithm = get("ssl.endpoint.identification.algorithm")
    return TlsSettings(
        keystore_type=keystore_type,
        keystore_location=get("ssl.keystore.location") or None,
        keystore_password=get("ssl.keystore.password"),
        key_password=get("ssl.key.password"),
        keystore_certificate_chain=chain,
        keystore_key=key,
        truststore_type=truststore_type,
        truststore_location=get("ssl.truststore.location") or None,
        truststore_password=get("ssl.truststore.password"),
        truststore_certificates=certificates,
        client_auth=client_auth,
        enabled_protocols=protocols,
        endpoint_identification_algorithm="https" if algorithm is None else algorithm,
        cipher_suites=csv("ssl.cipher.suites") or (),
    )


def server_context(settings: TlsSettings) -> ssl.SSLContext:
    """A listener's context: its keystore, and the truststore that checks client certificates
    when `ssl.client.auth` asks for them."""
    if not settings.has_keystore:
        raise TlsConfigError("an SSL listener needs a keystore: set ssl.keystore.location, or "
                             "ssl.keystore.certificate.chain and ssl.keystore.key")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _configure(context, settings)
    _load_keystore(context, settings)
    if settings.client_auth is not ClientAuth.NONE:
        if not settings.has_truststore:
            raise TlsConfigError(f"ssl.client.auth={settings.client_auth} needs a truststore to check client "
                                 "certificates: set ssl.truststore.location or ssl.truststore.certificates")
        _load_truststore(context, settings)
        context.verify_mode = (ssl.CERT_REQUIRED if settings.client_auth is ClientAuth.REQUIRED
                               else ssl.CERT_OPTIONAL)
    else:
        context.verify_mode = ssl.CERT_NONE
    return context


def client_context(settings: TlsSettings) -> ssl.SSLContext:
    """A client's context: the server's certificate is always checked against the truststore
    (the system's CAs without one, as Java falls back to its own), the host name as
    `ssl.endpoint.identification.algorithm` says, and the keystore (if any) is offered for mTLS."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _configure(context, settings)
    context.check_hostname = settings.endpoint_identification_algorithm.lower() == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    if settings.has_truststore:
        _load_truststore(context, settings)
    else:
        context.load_default_certs(ssl.Purpose.SERVER_AUTH)
    if settings.has_keystore:
        _load_keystore(context, settings)
    return context


def _configure(context: ssl.SSLContext, settings: TlsSettings) -> None:
    versions = sorted(_PROTOCOLS[p] for p in settings.enabled_protocols)
    context.minimum_version = versions[0]
    context.maximum_version = versions[-1]
    if settings.cipher_suites:
        try:
            context.set_ciphers(":".join(settings.cipher_suites))
        except ssl.SSLError as e:
            raise TlsConfigError(f"ssl.cipher.suites: {e}") from None


def _read(location: str, key: str) -> bytes:
    try:
        return Path(location).read_bytes()
    except OSError as e:
        raise TlsConfigError(f"{key}: cannot read {location}: {e.strerror}") from None


@contextlib.contextmanager
def _private_file(data: bytes) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="kraft-tls-") as directory:
        os.chmod(directory, 0o700)
        path = os.path.join(directory, "material.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        yield path


def _load_keystore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.keystore_type == "PEM":
        if settings.keystore_certificate_chain is not None and settings.keystore_key is not None:
            material = (settings.keystore_key.strip() + "\n" + settings.keystore_certificate_chain.strip() + "\n").encode()
        else:
            material = _read(settings.keystore_location or "", "ssl.keystore.location")
        password = settings.key_password
    else:
        material = _pkcs12_keystore_pem(settings)
        password = None
    with _private_file(material) as path:
        try:
            context.load_cert_chain(path, password=password.encode() if password else None)
        except ssl.SSLError as e:
            raise TlsConfigError(f"the keystore ({_keystore_name(settings)}) holds no usable certificate and "
                                 f"key: {e.reason or e}") from None


def _keystore_name(settings: TlsSettings) -> str:
    return settings.keystore_location or "ssl.keystore.certificate.chain and ssl.keystore.key"


def _pkcs12_keystore_pem(settings: TlsSettings) -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    location = settings.keystore_location or ""
    data = _read(location, "ssl.keystore.location")
    password = settings.keystore_password
    try:
        key, certificate, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as e:
        raise TlsConfigError(f"ssl.keystore.location {location}: not a PKCS12 keystore this password opens ({e})") from None
    if key is None or certificate is None:
        raise TlsConfigError(f"ssl.keystore.location {location}: the PKCS12 keystore holds no private key entry")
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    for cert in (certificate, *extra):
        pem += cert.public_bytes(serialization.Encoding.PEM)
    return pem


def _load_truststore(context: ssl.SSLContext, settings: TlsSettings) -> None:
    if settings.truststore_type == "PEM":
        if settings.truststore_certificates is not None:
            pem = settings.truststore_certificates
        else:
            pem = _read(settings.truststore_location or "", "ssl.truststore.location").decode("ascii", "replace")
    else:
        pem = _pkcs12_truststore_pem(settings)
    try:
        context.load_verify_locations(cadata=pem)
    except (ssl.SSLError, ValueError) as e:
        raise TlsConfigError(f"the truststore holds no certificate: {e}") from None


def _pkcs12_truststore_pem(settings: TlsSettings) -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.serialization import pkcs12

    location = settings.truststore_location or ""
    data = _read(location, "ssl.truststore.location")
    password = settings.truststore_password
    try:
        store = pkcs12.load_pkcs12(data, password.encode() if password else None)
    except ValueError as e:
        raise TlsConfigError(f"ssl.truststore.location {location}: not a PKCS12 store this password opens ({e})") from None
    certificates = [c.certificate for c in store.additional_certs]
    if store.cert is not None:
        certificates.append(store.cert.certificate)
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
