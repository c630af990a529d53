"""A node's listener and client security, from its `server.properties`, in one place.

Every listener of a node (the controller listener, the broker listeners) takes its TLS and SASL
settings from the same keys (`protocol.security`), and every connection the node opens to
another node speaks the security protocol of the listener it dials: the first of
`controller.listener.names` for raft and broker-to-controller traffic (SASL with
`sasl.mechanism.controller.protocol`), `inter.broker.listener.name` for replication (SASL with
`sasl.mechanism.inter.broker.protocol`). The node's own certificate (the listener's keystore) is
its client certificate, so on mTLS listeners nodes authenticate each other and a node with a
certificate from another CA is refused at the handshake.

SCRAM credentials come from the metadata image the caller hands in (`scram_lookup`).
"""

from __future__ import annotations

from collections.abc import Callable

from kraft_engine.metadata.metadata_image import MetadataImage
from kraft_engine.metadata.security_images import SCRAM_MECHANISMS as SCRAM_MECHANISM_NAMES
from kraft_engine.protocol.sasl import ScramLookup
from kraft_engine.protocol.scram import SCRAM_MECHANISMS, ScramCredential
from kraft_engine.protocol.security import (
    ClientSecurity,
    ListenerSecurity,
    SecurityConfigError,
    listener_client_security,
    listener_security,
)
from kraft_engine.server.config import KafkaConfig
from kraft_engine.server.startup_checks import StartupError

__all__ = ["controller_client_security", "inter_broker_client_security", "node_listener_security", "scram_lookup"]

# Client contexts by (config identity, listener): built once per node, not per connection.
_CLIENT_CACHE: dict[tuple[int, str], tuple[KafkaConfig, ClientSecurity | None]] = {}
_MECHANISM_IDS = {name: mechanism_id for mechanism_id, name in SCRAM_MECHANISM_NAMES.items()}


def scram_lookup(image: Callable[[], MetadataImage]) -> ScramLookup:
    """SCRAM credentials from the current metadata image's UserScramCredentialRecords."""

    def lookup(mechanism: str, user: str) -> ScramCredential | None:
        mechanism_id = _MECHANISM_IDS.get(mechanism)
        if mechanism_id is None or mechanism not in SCRAM_MECHANISMS:
            return None
        record = image().scram.credentials.get((mechanism_id, user))
        if record is None:
            return None
        return ScramCredential(salt=bytes(record.salt), stored_key=bytes(record.stored_key),
                               server_key=bytes(record.server_key), iterations=int(record.iterations))

    return lookup


def node_listener_security(config: KafkaConfig, listener_name: str, *,
                           scram_credentials: ScramLookup | None = None) -> ListenerSecurity:
    protocol = config.listener_security_protocol_map.get(listener_name, "PLAINTEXT")
    try:
        return listener_security(config.originals, listener_name=listener_name, security_protocol=protocol,
                                 scram_credentials=scram_credentials)
    except SecurityConfigError as e:
        raise StartupError(str(e)) from None


def _client(config: KafkaConfig, listener_name: str, mechanism_key: str) -> ClientSecurity | None:
    key = (id(config), listener_name)
    cached = _CLIENT_CACHE.get(key)
    if cached is not None and cached[0] is config:
        return cached[1]
    protocol = config.listener_security_protocol_map.get(listener_name, "PLAINTEXT")
    security = None
    if protocol != "PLAINTEXT":
        try:
            security = listener_client_security(config.originals, listener_name=listener_name,
                                                security_protocol=protocol, mechanism_key=mechanism_key)
        except SecurityConfigError as e:
            raise StartupError(str(e)) from None
    _CLIENT_CACHE[key] = (config, security)
    return security


def controller_client_security(config: KafkaConfig) -> ClientSecurity | None:
    """How this node reaches the controllers (None: plaintext)."""
    return _client(config, config.controller_listener_names[0], "sasl.mechanism.controller.protocol")


def inter_broker_client_security(config: KafkaConfig) -> ClientSecurity | None:
    """How this broker reaches the other brokers (None: plaintext)."""
    return _client(config, config.inter_broker_listener_name, "sasl.mechanism.inter.broker.protocol")
