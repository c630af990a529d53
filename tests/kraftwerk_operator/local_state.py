"""What `kraftwerk up` writes under its state directory, read back by the process tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

__all__ = ["written_status"]


def written_status(state: Path, name: str, *, namespace: str = "default") -> dict[str, Any] | None:
    """The status the local runtime last wrote for cluster `name`, or None while there is none (or
    it is caught mid-write)."""
    try:
        return yaml.safe_load((state / namespace / name / "status.yaml").read_text())["status"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
