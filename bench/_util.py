"""Shared pieces of the benchmarks: free ports, processes, a keep-alive HTTP client, statistics.

Benchmarks print figures; they never assert. The HTTP client is a minimal asyncio HTTP/1.1 client
with one persistent connection per writer, so that both systems under test (our nodes' HTTP
endpoint and etcd's JSON gateway) are driven the same way and the client costs the same for both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kraft_engine.loopback_ports import free_loopback_ports as free_ports

__all__ = [
    "HOST",
    "HttpConnection",
    "free_ports",
    "kill_9",
    "load_average",
    "median",
    "percentile",
    "print_table",
    "process_cpu_s",
    "rss_mib",
    "start_process",
    "stop_process",
    "wait_until",
]

HOST = "127.0.0.1"


def start_process(args: Sequence[str], *, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(list(args), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop_process(process: subprocess.Popen[bytes], *, sig: int = signal.SIGTERM, timeout_s: float = 30) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def rss_mib(pid: int) -> float:
    """Resident set size of a process in MiB (Linux /proc)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def percentile(values: Sequence[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def wait_until(condition: Any, *, timeout_s: float, interval_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval_s)
    raise TimeoutError(f"condition not met within {timeout_s} s")


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    print("  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)))
    for row in rows:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))


class HttpConnection:
    """One persistent HTTP/1.1 connection (Content-Length bodies only)."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: Any = None, *, timeout_s: float = 10) -> tuple[int, Any]:
        try:
            return await self._exchange(method, path, body, timeout_s=timeout_s)
        except BaseException:
            # A request cut short (timeout, reset) leaves an unread answer on the stream: the
            # next request must not read it as its own, so it gets a fresh connection.
            await self.close()
            raise

    async def _exchange(self, method: str, path: str, body: Any, *, timeout_s: float) -> tuple[int, Any]:
        async with asyncio.timeout(timeout_s):
            if self._writer is None:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            reader, writer = self._reader, self._writer
            assert reader is not None
            data = b"" if body is None else json.dumps(body).encode()
            writer.write(
                f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n".encode() + data
            )
            await writer.drain()
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionError("connection closed")
            status = int(status_line.split()[1])
            length = 0
            close = False
            while True:
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value.strip())
                elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                    close = True
            payload = await reader.readexactly(length) if length else b""
            if close:
                await self.close()
            return status, json.loads(payload) if payload else None

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


def kill_9(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()


def process_cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process so far (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, for the line a figure is printed beside."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
