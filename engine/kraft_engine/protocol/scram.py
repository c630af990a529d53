"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them.

Kafka stores no password: a credential is (salt, iterations, StoredKey, ServerKey), the
`UserScramCredentialRecord` in the metadata log. The server proves it holds the credential with
the ServerSignature, and checks the client's proof without ever seeing the password:

    SaltedPassword  = Hi(password, salt, iterations)            (PBKDF2 with HMAC-H)
    ClientKey       = HMAC(SaltedPassword, "Client Key")
    StoredKey       = H(ClientKey)
    ServerKey       = HMAC(SaltedPassword, "Server Key")
    AuthMessage     = client-first-bare "," server-first "," client-final-without-proof
    ClientProof     = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server's nonce is fresh for every exchange, so a recorded client-final (proof and nonce) is
refused: its nonce is not this exchange's, and its proof was made for another AuthMessage.
As in Kafka, the password is the UTF-8 bytes of the string (no SASLprep), channel binding is
refused (gs2 header `n,,`), an authorization id must equal the user name, and the only
extension Kafka knows (`tokenauth`, delegation tokens) is refused as delegation tokens are not
served.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from kraft_engine.protocol.errors import KafkaProtocolError

__all__ = [
    "SCRAM_MECHANISMS",
    "ScramClient",
    "ScramCredential",
    "ScramError",
    "ScramMechanism",
    "ScramServer",
    "scram_credential",
]


class ScramError(KafkaProtocolError, ValueError):
    """A SCRAM exchange that fails: malformed message, unknown user or wrong proof."""


@dataclass(frozen=True, slots=True)
class ScramMechanism:
    name: str
    hash_name: str
    mechanism_id: int  # Kafka's ScramMechanism type (the record's Mechanism field)
    min_iterations: int = 4096
    max_iterations: int = 16384  # Kafka refuses more in AlterUserScramCredentials

    def digest(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()


SCRAM_MECHANISMS = {
    m.name: m for m in (ScramMechanism("SCRAM-SHA-256", "sha256", 1), ScramMechanism("SCRAM-SHA-512", "sha512", 2))
}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def _salted_password(mechanism: ScramMechanism, password: str, salt: bytes, iterations: int) -> bytes:
    return hashlib.pbkdf2_hmac(mechanism.hash_name, password.encode("utf-8"), salt, iterations)


def scram_credential(mechanism: ScramMechanism, *, password: str | None = None, salt: bytes | None = None,
                     iterations: int = 4096, salted_password: bytes | None = None) -> ScramCredential:
    """The credential Kafka stores for `password` (a random salt unless one is given), or for an
    already salted password (`salted_password`, with its salt)."""
    if not mechanism.min_iterations <= iterations <= mechanism.max_iterations:
        raise ScramError(f"{mechanism.name} iterations must be between {mechanism.min_iterations} and "
                         f"{mechanism.max_iterations}, got {iterations}")
    if (password is None) == (salted_password is None):
        raise ScramError("give either a password or a salted password")
    if salted_password is not None and salt is None:
        raise ScramError("a salted password needs its salt")
    salt = secrets.token_bytes(32) if salt is None else salt
    salted = salted_password if salted_password is not None else _salted_password(
        mechanism, password or "", salt, iterations)
    client_key = mechanism.hmac(salted, b"Client Key")
    return ScramCredential(salt=salt, stored_key=mechanism.digest(client_key),
                           server_key=mechanism.hmac(salted, b"Server Key"), iterations=iterations)


# RFC 5802's grammar, as Kafka's ScramMessages reads it.
_SASLNAME = r"(?:[\x01-\x2B\x2D-\x3C\x3E-\x7F]|=2C|=3D)+"
_PRINTABLE = r"[\x21-\x2B\x2D-\x7E]+"
_BASE64 = r"[A-Za-z0-9+/]*={0,2}"
_EXTENSIONS = r"(?:,[A-Za-z]+=[\x01-\x2B\x2D-\x7F]*)*"
_CLIENT_FIRST = re.compile(
    rf"n,(?:a=(?P<authzid>{_SASLNAME}))?,(?P<bare>(?:m={_PRINTABLE},)?n=(?P<saslname>{_SASLNAME}),"
    rf"r=(?P<nonce>{_PRINTABLE})(?P<extensions>{_EXTENSIONS}))"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE})(?:{_EXTENSIONS})),p=(?P<proof>{_BASE64})"
)
_SERVER_FIRST = re.compile(
    rf"(?:m={_PRINTABLE},)?r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]+)(?:{_EXTENSIONS})"
)
_SERVER_FINAL = re.compile(rf"(?:e=(?P<error>[\x21-\x2B\x2D-\x7E]+)|v=(?P<signature>{_BASE64}))(?:{_EXTENSIONS})")


def _username(saslname: str) -> str:
    return saslname.replace("=2C", ",").replace("=3D", "=")


def _saslname(username: str) -> str:
    return username.replace("=", "=3D").replace(",", "=2C")


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ScramError(f"invalid base64: {e}") from None


def _decode(message: bytes) -> str:
    try:
        return message.decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError("SCRAM message is not UTF-8") from None


class ScramServer:
    """One server side of one exchange: `first` answers the client-first message once the
    credential is found, `final` checks the proof and returns the server-final message."""

    def __init__(self, mechanism: ScramMechanism, *, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._server_nonce = nonce if nonce is not None else secrets.token_urlsafe(24).replace("-", "_")
        self.username: str | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self.complete = False

    def client_first(self, message: bytes) -> str:
        """The user name the client-first message asks to authenticate (parsing it)."""
        text = _decode(message)
        match = _CLIENT_FIRST.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM client first message")
        extensions = match.group("extensions")
        if extensions:
            names = [e.split("=", 1)[0] for e in extensions[1:].split(",")]
            if "tokenauth" in names:
                raise ScramError("Delegation token authentication is not supported")
        username = _username(match.group("saslname"))
        authzid = match.group("authzid")
        if authzid is not None and _username(authzid) != username:
            raise ScramError("Authentication failed: Client requested an authorization id that is different "
                             "from username")
        self.username = username
        self._client_first_bare = match.group("bare")
        self._nonce = match.group("nonce") + self._server_nonce
        return username

    def server_first(self, credential: ScramCredential) -> bytes:
        if self.username is None:
            raise ScramError("server-first before client-first")
        if credential.iterations < self.mechanism.min_iterations:
            raise ScramError("Iterations less than minimum")
        self._credential = credential
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        """Check the client's proof; the server-final message (`v=ServerSignature`) when it holds."""
        credential = self._credential
        if credential is None or self.complete:
            raise ScramError("client-final out of order")
        text = _decode(message)
        match = _CLIENT_FINAL.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM client final message")
        if match.group("nonce") != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        if _b64decode(match.group("channel")) != b"n,,":
            raise ScramError("Invalid channel binding")
        proof = _b64decode(match.group("proof"))
        auth_message = f"{self._client_first_bare},{self._server_first},{match.group('without_proof')}".encode()
        client_signature = self.mechanism.hmac(credential.stored_key, auth_message)
        if len(proof) != len(client_signature):
            raise ScramError("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        if not hmac.compare_digest(self.mechanism.digest(client_key), credential.stored_key):
            raise ScramError("Invalid client credentials")
        self.complete = True
        signature = self.mechanism.hmac(credential.server_key, auth_message)
        return b"v=" + base64.b64encode(signature)


class ScramClient:
    """The client side, for the engine's own connections (inter-broker, tools)."""

    def __init__(self, mechanism: ScramMechanism, *, username: str, password: str, nonce: str | None = None) -> None:
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce if nonce is not None else secrets.token_urlsafe(24).replace("-", "_")
        self._bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = _decode(server_first)
        match = _SERVER_FIRST.fullmatch(text)
        if match is None:
            raise ScramError("Invalid SCRAM server first message")
        nonce = match.group("nonce")
        if not nonce.startswith(self._nonce) or nonce == self._nonce:
            raise ScramError("Invalid server nonce: does not start with client nonce")
        iterations = int(match.group("iterations"))
        if iterations < self.mechanism.min_iterations:
            raise ScramError(f"Requested iterations {iterations} is less than the minimum "
                             f"{self.mechanism.min_iterations} for {self.mechanism.name}")
        salted = _salted_password(self.mechanism, self._password, _b64decode(match.group("salt")), iterations)
        without_proof = f"c={base64.b64encode(b'n,,').decode()},r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = self.mechanism.hmac(salted, b"Client Key")
        signature = self.mechanism.hmac(self.mechanism.digest(client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        self._server_signature = self.mechanism.hmac(self.mechanism.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        match = _SERVER_FINAL.fullmatch(_decode(server_final))
        if match is None:
            raise ScramError("Invalid SCRAM server final message")
        if match.group("error") is not None:
            raise ScramError(f"SCRAM authentication failed: {match.group('error')}")
        if not hmac.compare_digest(_b64decode(match.group("signature")), self._server_signature):
            raise ScramError("Invalid server signature in server final message")
