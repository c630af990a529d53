"""Loopback ports for local nodes, picked from one range that nothing else hands out.

Both the quickstart and the operator's local runtime choose listener ports for nodes they start;
this is the one place that knows which ports are safe to choose.

Between the moment a port is found free and the moment its node binds it, anything else may take
it. Three things rule that out:

- The range lies below the kernel's ephemeral range (outgoing connections take ports from there:
  a peer reconnecting to a stopped controller's port can even connect to itself, TCP simultaneous
  open on loopback, and the controller then cannot bind its own port) and below Kubernetes'
  NodePort range (30000-32767: a cluster on the same machine binds those for its Services).
- `KRAFTWERK_PORT_RANGE=low-high` (inclusive) narrows the range, so that pickers running side by
  side (two test workers, two quickstarts) get ranges of their own that cannot overlap.
- Within one process, picks walk the range from a random start and never hand out a port twice
  before the walk wraps around, so a node that has not bound its ports yet keeps them.

A port counts as free only when it can be bound on every address (0.0.0.0): nodes bind their
listeners on 127.0.0.1 but their /metrics endpoint on 0.0.0.0, and a socket another program holds
on any address of the machine makes the wildcard bind fail.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

__all__ = [
    "HOST",
    "LOWEST_PICKED_PORT",
    "PORT_RANGE_ENV",
    "first_ephemeral_port",
    "free_loopback_ports",
    "free_port_block",
    "picking_range",
    "port_is_free",
]

HOST = "127.0.0.1"
PORT_RANGE_ENV = "KRAFTWERK_PORT_RANGE"

# Linux publishes its ephemeral range; elsewhere assume the common defaults (Linux 32768-60999,
# BSD/macOS/IANA 49152-65535).
_EPHEMERAL_RANGE_PATH = Path("/proc/sys/net/ipv4/ip_local_port_range")
_DEFAULT_EPHEMERAL_LOW = 32768
_NODE_PORT_LOW = 30000
LOWEST_PICKED_PORT = 10000
_WILDCARD = "0.0.0.0"

_lock = threading.Lock()
# Where this process's walk through each range goes on: range -> index of the next candidate.
_cursors: dict[range, int] = {}


def first_ephemeral_port() -> int:
    try:
        low, _high = _EPHEMERAL_RANGE_PATH.read_text(encoding="ascii").split()
        return int(low)
    except (OSError, ValueError):
        return _DEFAULT_EPHEMERAL_LOW


def picking_range() -> range:
    """The ports pickers choose from: `KRAFTWERK_PORT_RANGE` (`low-high`, inclusive) when set, else
    from 10000 up to the lower of the ephemeral range and the NodePort range (may be empty)."""
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return range(LOWEST_PICKED_PORT, min(first_ephemeral_port(), _NODE_PORT_LOW))
    low_text, dash, high_text = text.partition("-")
    try:
        low, high = int(low_text), int(high_text)
    except ValueError:
        low, high = 0, -1
    if not dash or not 1024 <= low <= high <= 65535:
        raise ValueError(f"{PORT_RANGE_ENV}={text!r} is not a port range 'low-high' within 1024-65535")
    return range(low, high + 1)


def _walk(ports: range) -> list[int]:
    """Every port of `ports` once, from where this process's last pick stopped (a random start the
    first time). Whoever takes ports moves the cursor past them (`_advance`)."""
    with _lock:
        start = _cursors.setdefault(ports, random.randrange(len(ports)))
    return [ports[(start + i) % len(ports)] for i in range(len(ports))]


def _advance(ports: range, *, last_taken: int) -> None:
    with _lock:
        _cursors[ports] = (ports.index(last_taken) + 1) % len(ports)


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct ports from `picking_range()` that are free now.

    Should the range hold too few free ports, the kernel's own choice (bind to port 0) is used for
    the rest.
    """
    ports = picking_range()
    picked: list[int] = []
    if ports:
        for port in _walk(ports):
            if len(picked) == count:
                break
            if port_is_free(port):
                picked.append(port)
        if picked:
            _advance(ports, last_taken=picked[-1])
    sockets: list[socket.socket] = []
    try:
        while len(picked) + len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((_WILDCARD, 0))
        return picked + [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port_block(*, size: int, step: int) -> int | None:
    """The first port of `size` consecutive ports of `picking_range()` that are all free now, a
    multiple of `step`; None if the range holds no such block now. Later picks of this process
    continue after the block."""
    ports = picking_range()
    for base in _walk(ports) if ports else []:
        if base % step or base + size > ports.stop:
            continue
        if all(port_is_free(base + offset) for offset in range(size)):
            _advance(ports, last_taken=base + size - 1)
            return base
    return None


def port_is_free(port: int) -> bool:
    """Whether a listener could bind `port` on every address (so on the loopback one too) now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((_WILDCARD, port))
        except OSError:
            return False
        return True
