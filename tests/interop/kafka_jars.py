"""Where the interop tests find Apache Kafka's jars, and how they run Kafka's DumpLogSegments.

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


def kafka_dump(*files: Path) -> str:
    assert CLASSPATH is not None
    result = subprocess.run(
        [
            "java",
            # Kafka's INFO logs would bury a real problem on stderr; warnings still show.
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            CLASSPATH,
            "kafka.tools.DumpLogSegments",
            "--cluster-metadata-decoder",
            "--files",
            ",".join(str(f) for f in files),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Exception" not in result.stdout + result.stderr, result.stderr
    return result.stdout
