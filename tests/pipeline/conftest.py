"""One local SparkSession for the whole test session (a JVM start costs seconds), with the
`kraft-metadata` source registered and few shuffle partitions (the inputs are small)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from kraft_pipeline.session import build_session

# The process harness (real controllers and brokers) lives beside the process tests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "process"))


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session(master="local[2]", app_name="kraftwerk-pipeline-tests", shuffle_partitions=2)
    try:
        yield session
    finally:
        session.stop()
