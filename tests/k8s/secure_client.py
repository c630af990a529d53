"""The client pod's program for secured clusters (kafka-python, in the project's image): it connects
with nothing but a user's Secret as the operator wrote it, mounted at CREDENTIALS (its `ca.crt`, and
`username`/`password` for a SCRAM-SHA-512 user or `user.crt`/`user.key` for a TLS user).

    python3 secure_client.py check BOOTSTRAP TOPIC COUNT CREDENTIALS [--create]
        (create TOPIC, replication factor 3), produce COUNT records with acks=all, read them back;
        exits 1 when one is missing or differs
    python3 secure_client.py workload BOOTSTRAP TOPIC STOP_FILE CREDENTIALS
        produce numbered records one at a time until STOP_FILE exists; a send that fails closes the
        producer and makes a new one from the files as they are then (an application that reloads
        its truststore when a connection fails: the mounted Secret follows the operator's changes);
        then read every acknowledged record back; exits 1 when one is lost
    python3 secure_client.py refused BOOTSTRAP TOPIC CREDENTIALS
        produce to TOPIC until the brokers refuse (up to three minutes); exits 0 once they do (the
        error's class is reported)

Each prints one JSON object as its last line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import KafkaError, TopicAlreadyExistsError

_PARTITIONS = 3
_READ_BACK_S = 180.0


def _security(credentials: Path) -> dict[str, Any]:
    """kafka-python's settings from the user's Secret, as an application would write them."""
    common = {"ssl_cafile": str(credentials / "ca.crt")}
    if (credentials / "user.crt").exists():
        return {**common, "security_protocol": "SSL", "ssl_certfile": str(credentials / "user.crt"),
                "ssl_keyfile": str(credentials / "user.key")}
    return {**common, "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
            "sasl_plain_username": (credentials / "username").read_text(),
            "sasl_plain_password": (credentials / "password").read_text()}


def _retrying(what: str, call: Callable[[], Any], *, deadline: float, pause_s: float) -> Any:
    """`call()` again after each KafkaError until `deadline` (time.monotonic()) passes."""
    while True:
        try:
            return call()
        except KafkaError as e:
            if time.monotonic() > deadline:
                raise
            print(f"{what}: {e!r}", flush=True)
            time.sleep(pause_s)


def _create_topic(bootstrap: str, topic: str, security: dict[str, Any]) -> None:
    """ACLs and credentials reach each broker through its metadata log a moment after the operator
    made them: retried for up to three minutes."""
    def create() -> None:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30_000, **security)
        try:
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics([NewTopic(topic, num_partitions=_PARTITIONS, replication_factor=3,
                                              topic_configs={"min.insync.replicas": "2"})])
        finally:
            admin.close()

    _retrying(f"create {topic}", create, deadline=time.monotonic() + 180, pause_s=2)


def _read_back(bootstrap: str, topic: str, security: dict[str, Any], *,
               done: Callable[[dict[tuple[int, int], str]], bool]) -> dict[tuple[int, int], str]:
    """The topic's records by (partition, offset), read from the beginning until `done` says so."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **security)
    read: dict[tuple[int, int], str] = {}
    try:
        partitions = [TopicPartition(topic, p) for p in range(_PARTITIONS)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + _READ_BACK_S
        while not done(read) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=1000).values():
                read.update({(r.partition, r.offset): r.value.decode() for r in records})
    finally:
        consumer.close()
    return read


def check(bootstrap: str, topic: str, count: int, credentials: Path, *, create: bool) -> int:
    security = _security(credentials)
    if create:
        _create_topic(bootstrap, topic, security)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=30_000,
                             max_block_ms=120_000, **security)
    sent: dict[tuple[int, int], str] = {}
    try:
        deadline = time.monotonic() + 180
        for i in range(count):
            value = f"record {i}"
            # leaders of a topic just created are being elected; retried within the deadline
            metadata = _retrying(f"send {i}", lambda v=value, p=i % _PARTITIONS: producer.send(
                topic, value=v.encode(), partition=p).get(timeout=60), deadline=deadline, pause_s=1)
            sent[(metadata.partition, metadata.offset)] = value
    finally:
        producer.close()
    read = _read_back(bootstrap, topic, security, done=lambda read: sent.keys() <= read.keys())
    same = {k: v for k, v in read.items() if k in sent} == sent
    print(json.dumps({"acknowledged": len(sent), "read": len(read), "same": same,
                      "protocol": security["security_protocol"]}, sort_keys=True), flush=True)
    return 0 if same else 1


def workload(bootstrap: str, topic: str, stop_file: str, credentials: Path) -> int:
    _create_topic(bootstrap, topic, _security(credentials))

    def producer() -> KafkaProducer:
        return KafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=20_000,
                             delivery_timeout_ms=60_000, max_block_ms=60_000, **_security(credentials))

    current: KafkaProducer | None = None
    acked: set[str] = set()
    failed = rebuilt = sequence = 0
    while not os.path.exists(stop_file):
        value = f"record-{sequence}"
        sequence += 1
        try:
            if current is None:
                current = producer()
                rebuilt += 1
            current.send(topic, key=value.encode(), value=value.encode()).get(timeout=90)
            acked.add(value)
        except KafkaError as e:
            failed += 1
            print(f"not acknowledged: {value}: {e!r}", flush=True)
            if current is not None:
                current.close(timeout=5)
            current = None
            time.sleep(1)
        if sequence % 100 == 0:
            print(f"acked {len(acked)} failed {failed} producers {rebuilt}", flush=True)
        time.sleep(0.05)
    if current is not None:
        current.close()
    read = set(_read_back(bootstrap, topic, _security(credentials),
                          done=lambda read: acked <= set(read.values())).values())
    lost = sorted(acked - read, key=lambda v: int(v.split("-")[1]))
    print(json.dumps({"acknowledged": len(acked), "failed": failed, "producers": rebuilt, "lost": lost[:20],
                      "lostCount": len(lost)}, sort_keys=True), flush=True)
    return 1 if lost else 0


def refused(bootstrap: str, topic: str, credentials: Path) -> int:
    """Produce until the brokers refuse (they apply a removed user's deletions from their metadata
    log a moment after the controller commits them), up to three minutes."""
    security = _security(credentials)
    error: str | None = None
    deadline = time.monotonic() + 180
    while error is None and time.monotonic() < deadline:
        producer: KafkaProducer | None = None
        try:
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False,
                                     request_timeout_ms=30_000, max_block_ms=60_000, **security)
            producer.send(topic, value=b"after removal", partition=0).get(timeout=60)
            print("still served", flush=True)
            time.sleep(2)
        except KafkaError as e:
            error = f"{type(e).__name__}: {e}"
        finally:
            if producer is not None:
                producer.close(timeout=5)
    print(json.dumps({"refused": error is not None, "error": error}, sort_keys=True), flush=True)
    return 0 if error is not None else 1


def main() -> int:
    mode, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "check":
        return check(bootstrap, topic, int(sys.argv[4]), Path(sys.argv[5]), create="--create" in sys.argv[6:])
    if mode == "workload":
        return workload(bootstrap, topic, sys.argv[4], Path(sys.argv[5]))
    if mode == "refused":
        return refused(bootstrap, topic, Path(sys.argv[4]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
