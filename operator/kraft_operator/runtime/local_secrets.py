"""Secrets on the local runtime: one directory per Secret, one file per key, readable by this user only.

`<state-dir>/<namespace>/_secrets/<name>/<key>`: the directory is 0700 and every file 0600, written
through a temporary file renamed over the old one (a node or a client reading it sees the old
material or the new, never half). A cluster's own Secrets record their cluster in `.owner`. The
`_secrets` name cannot be a cluster's (cluster names are DNS labels), so it never collides with a
cluster's directory; a user brings their own CA by making `_secrets/<name>/ca.crt` and `ca.key`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kraft_operator.model import KRaftCluster

__all__ = ["LocalSecrets"]

_OWNER = ".owner"


class LocalSecrets:
    def __init__(self, state_dir: Path, *, directory_name: str) -> None:
        self.state_dir = state_dir
        self.directory_name = directory_name

    def path(self, namespace: str, name: str) -> Path:
        return self.state_dir / namespace / self.directory_name / name

    async def read(self, namespace: str, name: str) -> dict[str, str] | None:
        directory = self.path(namespace, name)
        if not directory.is_dir():
            return None
        return {f.name: f.read_text(encoding="utf-8") for f in sorted(directory.iterdir())
                if f.is_file() and not f.name.startswith(".")}

    async def write(self, namespace: str, name: str, data: dict[str, str], *, cluster: KRaftCluster) -> None:
        directory = self.path(namespace, name)
        directory.parent.mkdir(parents=True, exist_ok=True)
        directory.mkdir(mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        for key, value in {**data, _OWNER: cluster.metadata.name}.items():
            if "/" in key or key in ("", ".", ".."):
                raise ValueError(f"Secret {name}: {key!r} is not a key")
            tmp = directory / f".{key}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(value)
            os.replace(tmp, directory / key)
        for stale in directory.iterdir():
            if stale.is_file() and stale.name not in data and stale.name != _OWNER:
                stale.unlink()

    async def delete(self, namespace: str, name: str) -> None:
        shutil.rmtree(self.path(namespace, name), ignore_errors=True)

    async def names(self, namespace: str, *, prefix: str) -> list[str]:
        root = self.state_dir / namespace / self.directory_name
        if not root.is_dir():
            return []
        return sorted(d.name for d in root.iterdir() if d.is_dir() and d.name.startswith(prefix))
