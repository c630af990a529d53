"""kafka-python 3.0 (3.0.12 is the newest as of this writing) drops the socket of a failed connection
attempt without closing it, and the tests run its clients against brokers that are killed, restarted
or not listening yet.

`KafkaNetSocket.connect` makes a socket and `sock_connect` raises on ECONNREFUSED (or a timeout)
leaving it open; `KafkaConnectionManager._build_transport` raises on a failed TLS handshake leaving
its transport open. Each such socket is closed only by the garbage collector, whose ResourceWarning
("unclosed <socket.socket ... laddr=('0.0.0.0', N)>", the address a refused socket reports) then
fails whichever test runs at that moment in the same process (warnings are errors). `close_failed_sockets`
closes them where they fail instead; tests/test_kafka_python_sockets.py shows the leak it repairs.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

with warnings.catch_warnings():
    # kafka-python reads its schemas with importlib.resources.read_text (deprecated) on import.
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.net.inet import KafkaNetSocket
    from kafka.net.transport import KafkaSSLTransport, KafkaTCPTransport

__all__ = ["close_failed_sockets"]

_Connect = Callable[..., Coroutine[Any, Any, Any]]


def _closing_socket(sock_connect: _Connect) -> _Connect:
    @functools.wraps(sock_connect)
    async def wrapper(self: KafkaNetSocket, net: Any, sock: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await sock_connect(self, net, sock, *args, **kwargs)
        except BaseException:
            sock.close()
            raise

    wrapper.__dict__["closes_failed_sockets"] = True
    return wrapper


def _closing_transport(handshake: _Connect) -> _Connect:
    @functools.wraps(handshake)
    async def wrapper(self: KafkaTCPTransport) -> Any:
        try:
            return await handshake(self)
        except BaseException as e:
            self.abort(e)
            raise

    wrapper.__dict__["closes_failed_sockets"] = True
    return wrapper


def close_failed_sockets() -> None:
    """Make kafka-python close the socket of every connection attempt that fails (idempotent)."""
    for cls, name, wrap in (
        (KafkaNetSocket, "sock_connect", _closing_socket),
        (KafkaTCPTransport, "handshake", _closing_transport),
        (KafkaSSLTransport, "handshake", _closing_transport),
    ):
        method = cls.__dict__.get(name)
        if method is None:
            raise RuntimeError(f"kafka-python changed: {cls.__name__}.{name} is gone; revisit {__name__}")
        if not getattr(method, "closes_failed_sockets", False):
            setattr(cls, name, wrap(method))
