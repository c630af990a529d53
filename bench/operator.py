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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clusters", default="1,10", help="cluster counts for the reconcile loop (default 1,10)")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--skip-up", action="store_true", help="skip the kraftwerk up runs")
    args = parser.parse_args()
    print(f"load average at start: {_load()} ({os.cpu_count()} CPUs)", flush=True)
    if not args.skip_up:
        up_to_ready(REPO / "examples" / "controllers.yaml")
        up_to_ready(REPO / "examples" / "quickstart.yaml")
    for count in (int(c) for c in args.clusters.split(",")):
        asyncio.run(reconcile_loop(count, rounds=args.rounds))


if __name__ == "__main__":
    main()
