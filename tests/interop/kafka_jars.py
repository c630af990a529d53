"""Where the interop tests find Apache Kafka's jars, and how they run Kafka's tools (DumpLogSegments and others).

`scripts/fetch-kafka-jars` caches the jars under `.kafka-jars/<version>/` (or `$KAFKA_JARS_DIR`);
without them, or without a JDK, every interop test skips.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _kafka_classpath() -> str | None:
    root = Path(os.environ.get("KAFKA_JARS_DIR", REPO / ".kafka-jars"))
    if not root.is_dir() or shutil.which("java") is None:
        return None
    for version_dir in sorted(root.iterdir(), reverse=True):
        if any(version_dir.glob("kafka_2.13-*.jar")):
            return f"{version_dir}/*"
    return None


CLASSPATH = _kafka_classpath()
needs_jars = pytest.mark.skipif(
    CLASSPATH is None, reason="Kafka jars not cached (run scripts/fetch-kafka-jars) or no java on PATH"
)


def kafka_tool(main_class: str, *args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (a main class in the jars); its status and output are the caller's to check."""
    assert CLASSPATH is not None
    return subprocess.run(
        # Kafka's INFO logs would bury a real problem on stderr; warnings still show.
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", CLASSPATH, main_class, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def kafka_dump(*files: Path) -> str:
    result = kafka_tool("kafka.tools.DumpLogSegments", "--cluster-metadata-decoder", "--files",
                        ",".join(str(f) for f in files))
    assert result.returncode == 0, result.stderr
    assert "Exception" not in result.stdout + result.stderr, result.stderr
    return result.stdout
