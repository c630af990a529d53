"""Operator figures on the local runtime: time from `kraftwerk up` to Ready, the operator process's
RSS, and the reconcile loop's duration at 1 and at 10 clusters. Prints figures; never passes or fails.

    .venv/bin/python bench/operator.py                 # all three
    .venv/bin/python bench/operator.py --clusters 1,10 --rounds 20 --skip-up

- up-to-Ready: `kraftwerk up -f examples/controllers.yaml --until-ready` (three engine controllers)
  and `examples/quickstart.yaml` (three engine controllers and three engine brokers: the README's
  main job), as a user runs them, in a fresh state directory; the time is what `kraftwerk up`
  prints ("Ready after N s", from its start to the first Ready status) and the RSS is the
  `kraftwerk` process's own peak (VmHWM, sampled), not its nodes'.
- reconcile loop: N clusters of one engine controller each brought to Ready in this process, then
  `rounds` passes over all of them (observe through the runtime and the admin client, plan, apply);
  it reports each reconcile's median and p95 and one whole pass's median, plus this process's RSS.
- roll (`--roll`): `examples/quickstart.yaml` (3 engine controllers, 3 engine brokers) brought
  to Ready in this process by the real reconciler and local runtime, a topic `bench` (RF 3, min
  ISR 2, 6 partitions) with a kafka-python producer (acks=all, idempotence) writing partition 0
  all along, then a config change that rolls every node, reconciled as `kraftwerk up` does
  (sleeping each plan's requeue interval, at least 0.2 s). Per node: the time from its
  RestartNode to the reconcile that saw it recovered (`node`: its own stop, start, log recovery,
  registration and catch-up, plus at most one reconcile interval of seeing it), and the gap from
  the previous node's recovery to its RestartNode (`gap`: the operator's own time between
  nodes, gates included). Whole-roll overhead = roll time - sum of node times. `URP wait` is the
  time reconciles spent with the roll held by an under-replicated partition (blockedBy of kind
  partition/cluster). Then the blocker-clear latency: a topic `pinned` with min.insync.replicas
  = 3 holds the next broker restart; the topic's min ISR is lowered to 2 (IncrementalAlterConfigs
  through kafka-python) and the time until the next RestartNode is measured, against the
  operator's busy requeue interval.
Timing on a shared machine is noisy: the load average is printed beside the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from kraft_operator.metrics import OperatorMetrics
from kraft_operator.model import ConditionStatus, ConditionType, KRaftCluster
from kraft_operator.reconciler import Reconciler
from kraft_operator.runtime.local import LocalRuntime

REPO = Path(__file__).resolve().parents[1]
KRAFTWERK = [sys.executable, "-c", "import sys; from kraft_operator.cli import main; sys.exit(main())"]


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _rss_kib(pid: int, field: str = "VmHWM") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def up_to_ready(spec: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="kraftwerk-bench-") as state:
        started = time.monotonic()
        process = subprocess.Popen(
            [*KRAFTWERK, "up", "-f", str(spec), "--state-dir", state, "--until-ready", "--demo-topic", ""],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
        )
        peak = 0
        while process.poll() is None:
            peak = max(peak, _rss_kib(process.pid))
            time.sleep(0.2)
        output = process.stdout.read() if process.stdout else ""
        wall = time.monotonic() - started
    match = re.search(r"Ready after ([0-9.]+) s", output)
    ready = f"{float(match.group(1)):.1f} s" if match else "NOT READY"
    print(f"{spec.name:<18} up->Ready {ready:>9}   whole run incl. stopping the nodes {wall:5.1f} s   "
          f"kraftwerk RSS peak {peak / 1024:6.1f} MiB   load {_load()}", flush=True)
    if not match:
        print(output[-2000:])


_ONE_CONTROLLER = """
apiVersion: kraftwerk.io/v1alpha1
kind: KRaftCluster
metadata: {{name: c{index}, generation: 1}}
spec:
  nodePools:
    - name: controllers
      roles: [controller]
      replicas: 1
      storage: {{volumes: [{{id: 0, size: 1Gi}}]}}
"""


async def reconcile_loop(count: int, *, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kraftwerk-bench-") as state:
        runtime = LocalRuntime(state)
        reconciler = Reconciler(runtime, rng=random.Random(count), metrics=OperatorMetrics())
        clusters = [KRaftCluster.model_validate(yaml.safe_load(_ONE_CONTROLLER.format(index=i))) for i in range(count)]
        try:
            deadline = time.monotonic() + 300
            ready: set[int] = set()
            while len(ready) < count and time.monotonic() < deadline:
                for i, cluster in enumerate(clusters):
                    result = await reconciler.reconcile(cluster)
                    clusters[i] = cluster.model_copy(update={"status": result.status})
                    condition = result.status.condition(ConditionType.READY)
                    if condition is not None and condition.status is ConditionStatus.TRUE and not result.actions:
                        ready.add(i)
                await asyncio.sleep(0.2)
            if len(ready) < count:
                print(f"{count:>2} cluster(s): only {len(ready)} Ready within 300 s")
                return
            each: list[float] = []
            passes: list[float] = []
            for _ in range(rounds):
                pass_started = time.perf_counter()
                for i, cluster in enumerate(clusters):
                    started = time.perf_counter()
                    result = await reconciler.reconcile(cluster)
                    each.append(time.perf_counter() - started)
                    clusters[i] = cluster.model_copy(update={"status": result.status})
                passes.append(time.perf_counter() - pass_started)
            each.sort()
            p95 = each[min(len(each) - 1, int(len(each) * 0.95))]
            print(f"{count:>2} cluster(s): reconcile median {statistics.median(each) * 1000:6.1f} ms, "
                  f"p95 {p95 * 1000:6.1f} ms; a pass over all {statistics.median(passes) * 1000:7.1f} ms "
                  f"(median of {rounds}); operator RSS {_rss_kib(os.getpid(), 'VmRSS') / 1024:.1f} MiB   "
                  f"load {_load()}", flush=True)
        finally:
            runtime.stop_all(timeout_s=30)


_PRODUCER = REPO / "tests" / "process" / "kafka_python_producer.py"


def _bootstrap(runtime: LocalRuntime, cluster: KRaftCluster, brokers: list[int]) -> str:
    from kraft_engine.storage.java_properties import parse_properties

    directory = runtime.cluster_dir(cluster)
    return ",".join(parse_properties((directory / f"node-{i}" / "server.properties").read_text())
                    ["advertised.listeners"].split("//", 1)[1] for i in brokers)


def _admin_call(bootstrap: str, call: str, *args: object) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
        try:
            getattr(admin, call)(*args)
        finally:
            admin.close()


def _topic(name: str, *, min_isr: int, partitions: int) -> object:
    from kafka.admin import NewTopic

    return NewTopic(name, num_partitions=partitions, replication_factor=3, topic_configs={"min.insync.replicas": str(min_isr)})


async def _settle(reconciler: Reconciler, cluster: KRaftCluster, *, timeout_s: float) -> KRaftCluster:
    """Reconcile until Ready with nothing under way (no action, no operation, URP 0)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = await reconciler.reconcile(cluster)
        cluster = cluster.model_copy(update={"status": result.status})
        ready = result.status.condition(ConditionType.READY)
        urp = result.status.partitions.under_replicated if result.status.partitions else 0
        if ready is not None and ready.status is ConditionStatus.TRUE and not result.actions and (
                result.status.operation is None and urp == 0):
            return cluster
        await asyncio.sleep(max(0.2, result.requeue_after_ms / 1000))
    raise RuntimeError(f"not settled within {timeout_s} s")


async def roll(spec: Path, *, pinned: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="kraftwerk-bench-roll-") as state:
        runtime = LocalRuntime(state)
        reconciler = Reconciler(runtime, rng=random.Random(7), metrics=OperatorMetrics())
        cluster = KRaftCluster.model_validate(yaml.safe_load(spec.read_text()))
        producer = None
        try:
            cluster = await _settle(reconciler, cluster, timeout_s=600)
            brokers = [n.id for n in cluster.status.nodes if "broker" in [r.value for r in n.roles]]
            bootstrap = _bootstrap(runtime, cluster, brokers)
            topics = [_topic("bench", min_isr=2, partitions=6)]
            if pinned:
                topics.append(_topic("pinned", min_isr=3, partitions=1))
            _admin_call(bootstrap, "create_topics", topics)
            acks = Path(state) / "acks.jsonl"
            with acks.open("w") as out:
                producer = subprocess.Popen([sys.executable, str(_PRODUCER), bootstrap, "bench", "0", "100000000"],
                                            stdout=out, stderr=subprocess.DEVNULL, cwd=REPO)
            cluster = await _settle(reconciler, cluster, timeout_s=300)
            spec_config = dict(cluster.spec.config)
            spec_config["log.retention.hours"] = str(100 + int(time.time()) % 1000)  # every node's config changes
            cluster = cluster.model_copy(update={"spec": cluster.spec.model_copy(update={"config": spec_config})})
            started = time.monotonic()
            restarted: dict[int, float] = {}
            recovered: dict[int, float] = {}
            order: list[int] = []
            urp_wait = 0.0
            interval = 0.0
            cleared_at: float | None = None
            after_clear: float | None = None
            while time.monotonic() - started < 1800:
                before = time.monotonic()
                result = await reconciler.reconcile(cluster)
                now = time.monotonic()
                cluster = cluster.model_copy(update={"status": result.status})
                for event in result.events:
                    if event.reason == "RestartNode":
                        node_id = int(event.message.split()[1].rstrip(":"))
                        restarted[node_id] = before  # the action ran inside this reconcile
                        order.append(node_id)
                        if cleared_at is not None and after_clear is None:
                            after_clear = before - cleared_at
                    elif event.reason == "NodeRecovered":
                        recovered[int(event.message.split()[1])] = now
                    elif event.reason == "RollFinished" and order:
                        recovered.setdefault(order[-1], now)
                operation = result.status.operation
                blockers = operation.blocked_by if operation is not None else []
                blocked = any(b.kind in ("partition", "cluster") and b.topic != "pinned" for b in blockers)
                if any(e.reason == "RollFinished" for e in result.events):
                    break
                interval = max(0.2, result.requeue_after_ms / 1000)
                if pinned and cleared_at is None and any(b.topic == "pinned" for b in blockers):
                    await asyncio.sleep(5)  # held: let it show, then fix the topic
                    from kafka.admin import ConfigResource, ConfigResourceType

                    _admin_call(bootstrap, "alter_configs",
                                [ConfigResource(ConfigResourceType.TOPIC, "pinned", configs={"min.insync.replicas": "2"})])
                    cleared_at = time.monotonic()
                    continue
                await asyncio.sleep(interval)
                if blocked:
                    urp_wait += time.monotonic() - before
            total = time.monotonic() - started
            node_times = {i: recovered[i] - restarted[i] for i in order if i in recovered}
            print(f"roll of {len(order)} nodes ({spec.name}, producer on bench-0): {total:6.1f} s   load {_load()}")
            previous_recovered = started
            for node_id in order:
                gap = restarted[node_id] - previous_recovered
                print(f"  node {node_id}: node {node_times.get(node_id, float('nan')):5.1f} s   gap before it "
                      f"{gap:5.1f} s")
                previous_recovered = recovered.get(node_id, previous_recovered)
            own = sum(node_times.values())
            print(f"  sum of node times {own:6.1f} s; overhead {total - own:5.1f} s ({(total - own) / own * 100:4.1f} %); "
                  f"URP/ISR wait {urp_wait:5.1f} s   load {_load()}")
            if pinned:
                text = f"{after_clear:4.2f} s" if after_clear is not None else "never cleared"
                print(f"  blocker cleared -> next RestartNode: {text} (busy requeue interval {interval:.1f} s)   "
                      f"load {_load()}")
            acked = acks.read_text().count('"offset"')
            print(f"  producer: {acked} records acknowledged during the run", flush=True)
        finally:
            if producer is not None:
                producer.terminate()
                producer.wait(timeout=60)
            runtime.stop_all(timeout_s=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", default="1,10", help="cluster counts for the reconcile loop (default 1,10)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--skip-up", action="store_true", help="skip the kraftwerk up runs")
    parser.add_argument("--roll", action="store_true", help="only the roll figures (twice: plain, then pinned)")
    args = parser.parse_args()
    print(f"load average at start: {_load()} ({os.cpu_count()} CPUs)", flush=True)
    if args.roll:
        asyncio.run(roll(REPO / "examples" / "quickstart.yaml", pinned=False))
        asyncio.run(roll(REPO / "examples" / "quickstart.yaml", pinned=True))
        return
    if not args.skip_up:
        up_to_ready(REPO / "examples" / "controllers.yaml")
        up_to_ready(REPO / "examples" / "quickstart.yaml")
    for count in (int(c) for c in args.clusters.split(",")):
        asyncio.run(reconcile_loop(count, rounds=args.rounds))


if __name__ == "__main__":
    main()
