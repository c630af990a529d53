"""The repair of kafka-python's socket leak (tests/kafka_python_sockets.py, applied to every test by
tests/conftest.py): a client that cannot reach its broker closes every socket it tried with."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.errors import KafkaTimeoutError
from kafka.net.inet import KafkaNetSocket

from kraft_engine.loopback_ports import HOST, free_loopback_ports


def sockets_of_refused_attempts(monkeypatch: pytest.MonkeyPatch, *, attempts: int = 2) -> list[socket.socket]:
    """The sockets a real consumer made trying to bootstrap from a port nothing listens on."""
    made: list[socket.socket] = []
    make = KafkaNetSocket.socket

    def recording(self: KafkaNetSocket, *args: Any) -> socket.socket:
        sock = make(self, *args)
        made.append(sock)
        return sock

    monkeypatch.setattr(KafkaNetSocket, "socket", recording)
    (port,) = free_loopback_ports(1)
    # kafka-python bootstraps in the constructor; with nothing listening it gives up, as it says.
    with pytest.raises(KafkaTimeoutError, match="Unable to bootstrap"):
        KafkaConsumer(bootstrap_servers=f"{HOST}:{port}", bootstrap_timeout_ms=5000,
                      reconnect_backoff_ms=20, reconnect_backoff_max_ms=50)
    assert len(made) >= attempts, f"the consumer tried only {len(made)} connections"
    return made


def test_kafka_python_left_alone_leaks_the_socket_of_a_refused_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    # The broken variant: kafka-python's own sock_connect, without the repair.
    monkeypatch.setattr(KafkaNetSocket, "sock_connect", KafkaNetSocket.sock_connect.__wrapped__)
    made = sockets_of_refused_attempts(monkeypatch)
    left_open = [sock for sock in made if sock.fileno() != -1]
    for sock in made:
        sock.close()
    assert left_open


def test_with_the_repair_every_refused_connection_closes_its_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    made = sockets_of_refused_attempts(monkeypatch)
    assert [sock for sock in made if sock.fileno() != -1] == []
