"""The java command lines that run Apache Kafka's own nodes and storage tool from its jars.

Both runtimes run a pool with `implementation: apache-kafka` the same way: the local runtime from
the jars `scripts/fetch-kafka-jars` caches, the Kubernetes runtime from the jars the image carries
under `/opt/kafka/libs`. Kafka's scripts (`kafka-server-start.sh`, `kafka-storage.sh`) only wrap
these classes; the image and the local runtime have the jars, not the scripts.

The JVM flags keep a node small and quick to start on a shared machine: a fixed heap well under a
pod's usual memory limit, the serial collector, the C1 compiler only. Kafka's logging goes through
slf4j's simple binding to stderr, the pod's (or the process's) log.
"""

from __future__ import annotations

__all__ = ["JVM_HEAP_MAX", "kafka_server_command", "kafka_storage_command"]

JVM_HEAP_MAX = "384m"


def _java(classpath: str, *, log_level: str) -> list[str]:
    return ["java", "-Xms64m", f"-Xmx{JVM_HEAP_MAX}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            f"-Dorg.slf4j.simpleLogger.defaultLogLevel={log_level}", "-cp", classpath]


def kafka_server_command(classpath: str, *, log_level: str = "warn") -> list[str]:
    """`kafka.Kafka`, Kafka's server main class; the config file path follows."""
    return [*_java(classpath, log_level=log_level), "kafka.Kafka"]


def kafka_storage_command(classpath: str, *, log_level: str = "warn") -> list[str]:
    """`kafka.tools.StorageTool` (kafka-storage.sh); its arguments (`format --config ...`) follow."""
    return [*_java(classpath, log_level=log_level), "kafka.tools.StorageTool"]
