"""Errors of the wire layer, each naming what went wrong and with whom.

They all derive from `KafkaProtocolError`, so a caller can catch the layer's failures in one place
while still telling a timeout (retry later) from an api the peer does not serve (never retry).
"""

from __future__ import annotations

from kraft_engine.errors import KraftError

__all__ = [
    "ConnectionFailed",
    "ConnectionLost",
    "KafkaProtocolError",
    "MalformedFrame",
    "RequestTimedOut",
    "UnsupportedApi",
    "UnsupportedVersion",
]


class KafkaProtocolError(KraftError):
    """Base class of the wire layer's errors."""


class MalformedFrame(KafkaProtocolError):
    """Bytes that are not a valid Kafka frame; `part` says which part failed ("header"/"body")."""

    def __init__(self, message: str, *, part: str = "header") -> None:
        super().__init__(message)
        self.part = part


class RequestTimedOut(KafkaProtocolError, TimeoutError):
    """No response within the request timeout. A response arriving later is discarded."""


class ConnectionFailed(KafkaProtocolError, ConnectionError):
    """Could not establish a connection (after backoff) within the allowed time."""


class ConnectionLost(KafkaProtocolError, ConnectionError):
    """The connection closed while the request was in flight; it may or may not have run."""


class UnsupportedApi(KafkaProtocolError):
    """The peer does not serve this api at all (absent from its ApiVersions answer)."""


class UnsupportedVersion(KafkaProtocolError):
    """The peer serves the api, but no version both sides speak (or not the one asked for)."""
