"""The generated table of Kafka's broker config keys is what Kafka 4.1's own classes say today
(`tools/gen_kafka_broker_configs.py --check`). Needs the cached Kafka jars and a JDK."""

from __future__ import annotations

import subprocess
import sys

import pytest

from .kafka_jars import REPO, needs_jars

pytestmark = [pytest.mark.kafka_jars]


@needs_jars
def test_the_broker_config_table_matches_kafkas_classes() -> None:
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gen_kafka_broker_configs.py"), "--check"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
