"""Certificate authorities and the certificates they sign, with `cryptography`.

The operator makes two CAs per cluster (the cluster CA signs nodes and the operator, the clients
CA signs users) and issues from them. Keys are EC P-256: quick to make, and every client we test
(Java's, librdkafka, kafka-python through Python's ssl) speaks ECDSA. Everything is PEM, the
format Kafka's `ssl.keystore.type=PEM` reads: a keystore is the private key (PKCS#8, unencrypted,
in a file only its owner reads) followed by the certificate chain.

Times come in as arguments (`now_ms`), so a test can issue a certificate that is already due.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateError",
    "KeyPair",
    "certificate_hosts",
    "check_ca",
    "fingerprint",
    "generate_ca",
    "is_issued_by",
    "issue",
    "not_after_ms",
    "subject",
]

_BACKDATE = datetime.timedelta(minutes=5)  # clock skew between the operator and the nodes


class CertificateError(ValueError):
    """PEM material that is not what it must be (a bring-your-own CA without its key, ...)."""


@dataclass(frozen=True, slots=True)
class KeyPair:
    """A certificate (PEM, possibly followed by its chain) and its private key (PEM, PKCS#8)."""

    certificate_pem: str
    key_pem: str

    @property
    def keystore_pem(self) -> str:
        """Kafka's PEM keystore: the key, then the certificate chain."""
        return self.key_pem.rstrip("\n") + "\n" + self.certificate_pem.rstrip("\n") + "\n"


def _time(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _name(common_name: str, organization: str | None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization is not None:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def _certificate(pem: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem.encode())
    except ValueError as e:
        raise CertificateError(f"not a PEM certificate: {e}") from None


def generate_ca(*, common_name: str, organization: str, validity_days: int, now_ms: int) -> KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name(common_name, organization)
    now = _time(now_ms)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(now + datetime.timedelta(days=validity_days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(certificate.public_bytes(serialization.Encoding.PEM).decode(), _key_pem(key))


def _load_ca(ca: KeyPair) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey]:
    certificate = _certificate(ca.certificate_pem)
    try:
        key = serialization.load_pem_private_key(ca.key_pem.encode(), password=None)
    except (ValueError, TypeError) as e:
        raise CertificateError(f"the CA's key cannot be read (unencrypted PEM needed): {e}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise CertificateError("the CA's key must be an EC or RSA key")
    if _public_der(key.public_key()) != _public_der(certificate.public_key()):
        raise CertificateError("the CA's key does not belong to its certificate")
    try:
        constraints = certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        constraints = None
    if constraints is None or not constraints.ca:
        raise CertificateError("the CA certificate is not a CA (basicConstraints CA:TRUE missing)")
    return certificate, key


def _public_der(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.DER,  # type: ignore[attr-defined,no-any-return]
                            serialization.PublicFormat.SubjectPublicKeyInfo)


def issue(
    ca: KeyPair, *, common_name: str, organization: str | None, hosts: tuple[str, ...] = (), validity_days: int,
    now_ms: int,
) -> KeyPair:
    """A certificate signed by `ca` (for server and client authentication), with `hosts` as its
    subject alternative names (IP addresses as such). It never outlives its CA. The returned
    certificate PEM is the chain: the certificate, then the CA's."""
    ca_certificate, ca_key = _load_ca(ca)
    key = ec.generate_private_key(ec.SECP256R1())
    now = _time(now_ms)
    not_after = min(now + datetime.timedelta(days=validity_days), ca_certificate.not_valid_after_utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization)).issuer_name(ca_certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _BACKDATE)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    certificate = builder.sign(ca_key, hashes.SHA256())
    chain = certificate.public_bytes(serialization.Encoding.PEM).decode() + ca.certificate_pem.rstrip("\n") + "\n"
    return KeyPair(chain, _key_pem(key))


def check_ca(ca: KeyPair) -> None:
    """Raise `CertificateError` unless `ca` is a usable CA (a bring-your-own one is checked so)."""
    _load_ca(ca)


def not_after_ms(certificate_pem: str) -> int:
    return int(_certificate(certificate_pem).not_valid_after_utc.timestamp() * 1000)


def subject(certificate_pem: str) -> str:
    """The subject as the engine and Kafka name the principal (RFC 4514)."""
    return _certificate(certificate_pem).subject.rfc4514_string()


def certificate_hosts(certificate_pem: str) -> tuple[str, ...]:
    """The subject alternative names (DNS names and IP addresses), in order."""
    try:
        names = _certificate(certificate_pem).extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return tuple(str(n.value) for n in names if isinstance(n, x509.DNSName | x509.IPAddress))


def is_issued_by(certificate_pem: str, ca_pem: str) -> bool:
    """Whether the (first) certificate was signed by this CA's key."""
    certificate, ca = _certificate(certificate_pem), _certificate(ca_pem)
    try:
        certificate.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def fingerprint(pem: str) -> str:
    """SHA-256 of the text: what a revision records of TLS material."""
    return hashlib.sha256(pem.encode()).hexdigest()[:16]
