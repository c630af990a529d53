"""`kraft configs` prints what Apache Kafka 4.1's kafka-configs prints, and each tool reads what
the other wrote.

Against our controller and broker: every command runs with Kafka's ConfigCommand and with
`kraft configs`, same arguments, and the two outputs are compared line for line (exit status,
stdout, and for a refusal the message on stderr): topic alterations and deletions, broker and
cluster-default alterations, the describes (dynamic, `--all`, defaults, every broker), users'
SCRAM credentials added and deleted by one tool and described by both, and the refusals (a deletion
of a config the topic does not have, two mechanisms of one user in one request).

Needs the cached Kafka jars and a JDK; skips cleanly without them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .kafka_jars import needs_jars
from .test_kafka_configs_tool import our_controller_and_broker
from .test_mixed_brokers import _DEADLINE_S, KRAFT, _java, _until

pytestmark = [pytest.mark.kafka_jars, pytest.mark.process, pytest.mark.slow]


def _kafka(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(_java("-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "kafka.admin.ConfigCommand", *args),
                          capture_output=True, text=True, timeout=_DEADLINE_S, check=False)


def _ours(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([KRAFT, "configs", *args], capture_output=True, text=True, timeout=_DEADLINE_S, check=False)


def _both(*args: str) -> str:
    """Run `args` with both tools (Kafka's first); they must agree; the output."""
    kafka, ours = _kafka(*args), _ours(*args)
    assert (ours.returncode, ours.stdout) == (kafka.returncode, kafka.stdout), (args, kafka.stderr, ours.stderr)
    if kafka.returncode != 0:
        assert ours.stderr.splitlines()[:1] == kafka.stderr.splitlines()[:1], (args, kafka.stderr, ours.stderr)
    return kafka.stdout


@needs_jars
@pytest.mark.timeout(1800)  # some 15 JVM starts of Kafka's tool: minutes each on a loaded machine
def test_kraft_configs_prints_what_kafka_configs_prints(tmp_path: Path) -> None:
    with our_controller_and_broker(tmp_path, {"log.retention.hours": "100"}) as (broker_port, _):
        server = ("--bootstrap-server", f"127.0.0.1:{broker_port}")
        created = subprocess.run(
            _java("org.apache.kafka.tools.TopicCommand", *server, "--create", "--topic", "t1", "--partitions", "1",
                  "--replication-factor", "1"), capture_output=True, text=True, timeout=_DEADLINE_S, check=False)
        assert created.returncode == 0, created.stderr

        assert _both(*server, "--alter", "--entity-type", "topics", "--entity-name", "t1", "--add-config",
                     "retention.ms=12345,cleanup.policy=[compact,delete]") == "Completed updating config for topic t1.\n"
        assert _both(*server, "--alter", "--broker", "101", "--add-config",
                     "log.retention.ms=777777") == "Completed updating config for broker 101.\n"
        assert _both(*server, "--alter", "--entity-type", "brokers", "--entity-default", "--add-config",
                     "log.retention.bytes=999999") == "Completed updating default config for brokers in the cluster.\n"

        # The alterations reach the broker through its metadata log: describe once it shows them.
        def settled() -> bool:
            topic = _ours(*server, "--describe", "--topic", "t1").stdout
            default = _ours(*server, "--describe", "--broker-defaults").stdout
            return "retention.ms=12345" in topic and "log.retention.bytes=999999" in default

        _until(settled, "the alterations in the broker's answers")
        described = _both(*server, "--describe", "--entity-type", "topics", "--entity-name", "t1")
        assert described.splitlines()[0] == "Dynamic configs for topic t1 are:"
        assert "  retention.ms=12345 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=12345, " \
               "DYNAMIC_BROKER_CONFIG:log.retention.ms=777777, STATIC_BROKER_CONFIG:log.retention.hours=100, " \
               "DEFAULT_CONFIG:log.retention.hours=168}" in described.splitlines()
        # (Every broker and then the cluster defaults: the broker's and the default's describes in one.)
        for args in (["--entity-type", "topics", "--entity-name", "t1", "--all"], ["--entity-type", "brokers"]):
            assert _both(*server, "--describe", *args), args

        # A deletion of what the topic does not have is refused by both, with Kafka's message.
        _both(*server, "--alter", "--topic", "t1", "--delete-config", "segment.ms")
        # A deletion changes the topic: each tool deletes one of the two overrides.
        deleted = (_kafka(*server, "--alter", "--topic", "t1", "--delete-config", "retention.ms"),
                   _ours(*server, "--alter", "--topic", "t1", "--delete-config", "cleanup.policy"))
        assert [(d.returncode, d.stdout) for d in deleted] == [(0, "Completed updating config for topic t1.\n")] * 2, \
            [d.stderr for d in deleted]
        _until(lambda: _ours(*server, "--describe", "--topic", "t1").stdout == "Dynamic configs for topic t1 are:\n",
               "both overrides to go")
        assert _both(*server, "--describe", "--topic", "t1") == "Dynamic configs for topic t1 are:\n"

        # SCRAM credentials: each tool adds one, both describe both, one deletes.
        assert _ours(*server, "--alter", "--entity-type", "users", "--entity-name", "alice", "--add-config",
                     "SCRAM-SHA-512=[iterations=8192,password=alice-secret]").stdout == \
            "Completed updating config for user alice.\n"
        # Two mechanisms of one user in one request: the controller refuses both (Kafka's rule,
        # DUPLICATE_RESOURCE), whichever tool sent them.
        _both(*server, "--alter", "--entity-type", "users", "--entity-name", "bob", "--add-config",
              "SCRAM-SHA-256=[password=bob-secret],SCRAM-SHA-512=[iterations=4096,password=bob-secret]")
        added = (_kafka(*server, "--alter", "--user", "bob", "--add-config", "SCRAM-SHA-256=[password=bob-secret]"),
                 _ours(*server, "--alter", "--user", "bob", "--add-config",
                       "SCRAM-SHA-512=[iterations=4096,password=bob-secret]"))
        assert [(a.returncode, a.stdout) for a in added] == [(0, "Completed updating config for user bob.\n")] * 2, \
            [a.stderr for a in added]

        def both_users_described() -> bool:
            return "SCRAM-SHA-512" in _ours(*server, "--describe", "--user", "bob").stdout

        _until(both_users_described, "the credentials in the broker's image")
        assert _both(*server, "--describe", "--entity-type", "users", "--entity-name", "alice") == \
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-512=iterations=8192\n"
        assert _both(*server, "--describe", "--entity-type", "users", "--entity-name", "bob") == \
            "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-256=iterations=4096, " \
            "SCRAM-SHA-512=iterations=4096\n"
        assert _ours(*server, "--alter", "--user", "bob", "--delete-config", "SCRAM-SHA-256").returncode == 0
        _until(lambda: "SCRAM-SHA-256" not in _kafka(*server, "--describe", "--user", "bob").stdout,
               "bob's SCRAM-SHA-256 credential to go")
        assert _both(*server, "--describe", "--user", "bob") == \
            "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=4096\n"
