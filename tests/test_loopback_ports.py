"""Loopback ports for local nodes: a port handed out must still be free when its node binds it,
whatever else runs on the machine (another test worker, a Kubernetes cluster, outgoing connections)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kraft_engine import loopback_ports
from kraft_engine.loopback_ports import (
    PORT_RANGE_ENV,
    free_loopback_ports,
    free_port_block,
    picking_range,
    port_is_free,
)


def held_port(address: str) -> tuple[socket.socket, int]:
    """A listening socket on `address` at a port the kernel chose."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((address, 0))
    sock.listen()
    return sock, sock.getsockname()[1]


def own_held_port() -> tuple[socket.socket, int]:
    """A listening socket at a port of this process's picking range (under xdist, this worker's own
    range), so that its neighbours are free too unless this process holds them."""
    (port,) = free_loopback_ports(1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock, port


def test_by_default_ports_come_from_below_the_ephemeral_and_the_nodeport_ranges(monkeypatch: pytest.MonkeyPatch) -> None:
    # A port from the ephemeral range can be taken by any outgoing connection (even one to that
    # very port, a loopback self-connect) before or while its node binds it; a Kubernetes cluster
    # on the machine binds NodePorts (30000-32767) for its Services.
    monkeypatch.delenv(PORT_RANGE_ENV, raising=False)
    first_ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert picking_range() == range(10000, min(first_ephemeral, 30000))
    ports = free_loopback_ports(6)
    assert len(set(ports)) == 6
    assert all(10000 <= p < min(first_ephemeral, 30000) for p in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("0.0.0.0", port))


def test_one_process_never_hands_a_port_out_twice_and_the_environment_narrows_the_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Within one process a node that has not bound its ports yet keeps them: picks walk on instead
    # of starting over. Two pickers side by side (two pytest-xdist workers) get disjoint ranges.
    ports = picking_range()
    first, second = free_loopback_ports(3), free_loopback_ports(3)
    assert len(set(first + second)) == 6 and all(p in ports for p in first + second)
    sock, port = own_held_port()
    with sock:
        monkeypatch.setenv(PORT_RANGE_ENV, f"{port}-{port}")
        assert picking_range() == range(port, port + 1)
        # The only port of the range is taken: the kernel chooses instead, still distinct ports.
        ports_now = free_loopback_ports(3)
    assert len(set(ports_now)) == 3 and port not in ports_now


@pytest.mark.parametrize("text", ["20000", "20000-19999", "80-90", "20000-70000", "a-b", "20000:21000"])
def test_a_bad_range_in_the_environment_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(PORT_RANGE_ENV, text)
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}='{text}' is not a port range"):
        free_loopback_ports(1)


def test_a_port_held_on_another_address_is_not_free(monkeypatch: pytest.MonkeyPatch) -> None:
    # A node binds its /metrics endpoint on 0.0.0.0: a port some program holds on any address of
    # the machine (here 127.0.0.2) passes a probe on 127.0.0.1 and then fails that bind.
    sock, port = held_port("127.0.0.2")
    with sock:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", port))  # what a loopback-only probe accepted
        assert not port_is_free(port)
        monkeypatch.setenv(PORT_RANGE_ENV, f"{port}-{port}")
        assert port not in free_loopback_ports(1)


def test_a_block_is_aligned_free_inside_the_range_and_later_picks_continue_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sock, port = own_held_port()
    with sock:
        low = (port // 10 + 1) * 10
        # Of the aligned blocks of 20 in [low - 10, low + 29], the one at `low - 10` holds `port`.
        monkeypatch.setenv(PORT_RANGE_ENV, f"{low - 10}-{low + 29}")
        monkeypatch.setattr(loopback_ports, "_cursors", {range(low - 10, low + 30): 0})
        assert free_port_block(size=20, step=10) == low
        assert free_loopback_ports(10) == list(range(low + 20, low + 30))
        monkeypatch.setenv(PORT_RANGE_ENV, f"{low - 10}-{low + 8}")
        assert free_port_block(size=20, step=10) is None
