"""Test certificate authorities: a CA, and certificates it signs, made with `cryptography`.

Every test that needs TLS builds its own CAs here (EC P-256 keys, fast to make), so an attack
test can hold a certificate from another CA with exactly the same names.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    certificate_pem: str
    key_pem: str
    chain_pem: str  # the certificate then its CA's

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """(certificate chain file, key file)."""
        chain = directory / f"{name}.crt"
        key = directory / f"{name}.key"
        chain.write_text(self.chain_pem)
        key.write_text(self.key_pem)
        return chain, key

    def keystore_pem(self, directory: Path, name: str) -> Path:
        """One PEM file with the key and the chain (a PEM `ssl.keystore.location`)."""
        path = directory / f"{name}-keystore.pem"
        path.write_text(self.key_pem + self.chain_pem)
        return path

    def pkcs12(self, directory: Path, name: str, password: str) -> Path:
        key = serialization.load_pem_private_key(self.key_pem.encode(), None)
        certs = x509.load_pem_x509_certificates(self.chain_pem.encode())
        path = directory / f"{name}.p12"
        path.write_bytes(pkcs12.serialize_key_and_certificates(
            name.encode(), key, certs[0], certs[1:],  # type: ignore[arg-type]
            serialization.BestAvailableEncryption(password.encode())))
        return path


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


class CertificateAuthority:
    def __init__(self, common_name: str = "test-ca") -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.name = _name(common_name)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )
        self.certificate_pem = self.certificate.public_bytes(serialization.Encoding.PEM).decode()

    def write(self, directory: Path, name: str = "ca") -> Path:
        path = directory / f"{name}.crt"
        path.write_text(self.certificate_pem)
        return path

    def issue(self, common_name: str, *, organization: str | None = None,
              hosts: tuple[str, ...] = ("localhost", "127.0.0.1")) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization)).issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(self.key, hashes.SHA256())
        )
        certificate_pem = certificate.public_bytes(serialization.Encoding.PEM).decode()
        key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()).decode()
        return Issued(certificate_pem=certificate_pem, key_pem=key_pem, chain_pem=certificate_pem + self.certificate_pem)
