"""Loopback ports for local nodes, picked below the kernel's ephemeral range.

Both the quickstart and the operator's local runtime choose listener ports for nodes they start;
this is the one place that knows which ports are safe to choose.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["HOST", "LOWEST_PICKED_PORT", "first_ephemeral_port", "free_loopback_ports", "port_is_free"]

HOST = "127.0.0.1"

# The kernel hands ports of its ephemeral range to every outgoing connection. A listener port
# picked from that range can be taken by one before the controller binds it, or while it is down:
# a peer reconnecting to a stopped controller's port can even connect to itself (TCP
# simultaneous open on loopback), and the controller then cannot bind its own port. Picking below
# the range rules both out. Linux publishes its range; elsewhere assume the common defaults
# (Linux 32768-60999, BSD/macOS/IANA 49152-65535).
_EPHEMERAL_RANGE_PATH = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32768
LOWEST_PICKED_PORT = 10000


def first_ephemeral_port() -> int:
    try:
        low, _high = _EPHEMERAL_RANGE_PATH.read_text(encoding="ascii").split()
        return int(low)
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL_LOW


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct loopback ports that are free now and outside the kernel's ephemeral range.

    Candidates are tried in random order (so concurrent callers rarely pick the same ones) and
    held open together until `count` are found. Should the ephemeral range leave too few ports
    below it, the kernel's own choice (bind to port 0) is used instead.
    """
    candidates = list(range(LOWEST_PICKED_PORT, first_ephemeral_port()))
    random.shuffle(candidates)
    sockets: list[socket.socket] = []
    try:
        for port in candidates:
            if len(sockets) == count:
                break
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((HOST, port))
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((HOST, 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def port_is_free(port: int) -> bool:
    """Whether a listener could bind `port` on the loopback address now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True
