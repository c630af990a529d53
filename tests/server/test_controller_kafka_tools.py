"""Apache Kafka's own kafka-features tool against our controller listener (skips without the jars).

The Java admin client with `--bootstrap-controller` negotiates ApiVersions, discovers the quorum
with DescribeCluster, reads features from ApiVersions and sends UpdateFeatures to the active
controller: every byte of that is Kafka's, so this checks our side of the wire end to end.
"""

from __future__ import annotations

import asyncio
import subprocess

from interop.kafka_jars import CLASSPATH, needs_jars
from test_controller_apis import _Served, served  # noqa: F401  (the fixture)
from test_controller_service import MV

pytestmark = needs_jars


def _kafka_features(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert CLASSPATH is not None
    return subprocess.run(
        ["java", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", CLASSPATH,
         "org.apache.kafka.tools.FeatureCommand", "--bootstrap-controller", bootstrap, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )


async def test_kafka_features_describes_our_controller(served: _Served) -> None:  # noqa: F811
    # The epoch is the image's offset when the controller answered; the log keeps moving (NoOp
    # records), so it lies between the offsets seen before and after the tool ran.
    before = served.node.service.image.offset
    result = await asyncio.to_thread(_kafka_features, served.bootstrap, "describe")
    after = served.node.service.image.offset
    assert result.returncode == 0, result.stdout + result.stderr
    prefix = ("Feature: metadata.version\tSupportedMinVersion: 3.3-IV3\tSupportedMaxVersion: 4.0-IV3"
              "\tFinalizedVersionLevel: 4.0-IV3\tEpoch: ")
    epochs = [int(line[len(prefix):]) for line in result.stdout.splitlines() if line.startswith(prefix)]
    assert len(epochs) == 1, result.stdout
    assert before <= epochs[0] <= after, (before, epochs, after)


async def test_kafka_features_dry_run_and_refusal_from_our_controller(served: _Served) -> None:  # noqa: F811
    ok = await asyncio.to_thread(_kafka_features, served.bootstrap, "downgrade", "--metadata", "4.0-IV3", "--dry-run")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # (Kafka 4.1 also prints that --metadata is deprecated in favour of --release-version.)
    assert f"metadata.version can be downgraded to {MV}." in ok.stdout.splitlines()
    refused = await asyncio.to_thread(_kafka_features, served.bootstrap, "downgrade", "--metadata", "3.3-IV3")
    assert refused.returncode == 1
    assert any(line.startswith("Could not downgrade metadata.version to 7.") for line in refused.stdout.splitlines())

