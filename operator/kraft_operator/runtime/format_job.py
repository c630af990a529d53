"""The program a format Job runs: `kraft storage format` (or, for an Apache Kafka node, Kafka's own
`kafka.tools.StorageTool format`), then each directory's id as the Job's result.

Kubernetes keeps the last bytes a container writes to its termination-message file in the pod's
status, readable by the operator without `pods/log` access and after the container has exited. So
the Job formats the node's directories with the engine's own storage tool (same flags as Kafka's
kafka-storage), or with Kafka's StorageTool for a pool with `implementation: apache-kafka`
(`--kafka-classpath`: the jars in the image), then writes one JSON object there: every log directory mapped to the
`directory.id` its `meta.properties` holds, and the `cluster.id` they carry. The operator records those ids in the cluster's status
(and in `--initial-controllers` for the first controllers they were chosen up front).

Re-running is safe: the plan passes `--ignore-formatted` once any directory is formatted, so a
formatted directory is skipped, never rewritten, and its id is reported again.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from kraft_engine.cli.main import main as kraft_main
from kraft_engine.kafka_uuid import to_kafka_str
from kraft_engine.server.config import load_config
from kraft_engine.storage.meta_properties import MetaPropertiesError, read_meta_properties
from kraft_operator.runtime.kafka_java import kafka_storage_command

__all__ = ["TERMINATION_LOG", "directory_ids", "main"]

TERMINATION_LOG = "/dev/termination-log"
# Kubernetes truncates a termination message at 4096 bytes; 16 volumes of ids fit in well under that.
_MESSAGE_LIMIT_BYTES = 4096


def directory_ids(config_path: str) -> tuple[dict[str, str], str | None]:
    """Every formatted log directory of the node's config (metadata log dir included) to its
    directory.id, and the cluster.id they were formatted with."""
    config = load_config(config_path)
    found: dict[str, str] = {}
    cluster_id: str | None = None
    for directory in dict.fromkeys([*config.all_log_dirs, config.metadata_log_dir]):
        try:
            meta = read_meta_properties(Path(directory))
        except (OSError, MetaPropertiesError):
            continue
        if meta.directory_id is not None:
            found[str(directory)] = to_kafka_str(meta.directory_id)
            cluster_id = meta.cluster_id
    return found, cluster_id


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kraft_operator.runtime.format_job",
        description="Run `kraft storage format ARGS` and write each directory's id to the termination log.",
    )
    parser.add_argument("--termination-log", default=TERMINATION_LOG)
    parser.add_argument("--kafka-classpath", help="format with Apache Kafka's StorageTool from these jars")
    parser.add_argument("format_args", nargs=argparse.REMAINDER, help="-- then `kraft storage format`'s arguments")
    args = parser.parse_args(argv)
    format_args = args.format_args[1:] if args.format_args[:1] == ["--"] else args.format_args
    if not format_args or format_args[0] != "format":
        parser.error("expected: -- format --config FILE --cluster-id ID ...")
    config_path = format_args[format_args.index("--config") + 1] if "--config" in format_args else None
    if config_path is None:
        parser.error("the format arguments need --config")
    if args.kafka_classpath:
        tool = "kafka.tools.StorageTool format"
        status = subprocess.run([*kafka_storage_command(args.kafka_classpath), *format_args],
                                check=False).returncode
    else:
        tool = "kraft storage format"
        status = kraft_main(["storage", *format_args])
    ids, cluster_id = directory_ids(config_path)
    report: dict[str, object] = {"clusterId": cluster_id, "directoryIds": ids}
    if status != 0:
        report["error"] = f"{tool} exited {status}"
    message = json.dumps(report, sort_keys=True)
    Path(args.termination_log).write_text(message[:_MESSAGE_LIMIT_BYTES])
    print(message)
    return status


if __name__ == "__main__":
    sys.exit(main())
