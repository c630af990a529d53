"""Operator figures on the e2e Kubernetes: time from `kubectl apply` of a KRaftCluster to Ready, and
the operator pod's memory. Prints figures; never passes or fails.

    e2e/cluster/cluster up && e2e/cluster/image
    .venv/bin/python bench/k8s_operator.py [--rounds 3]

Each round installs nothing new: the chart is installed once (two replicas, peering) in a fresh
namespace; then per round `examples/kraftcluster.yaml` without its broker pool (the engine has no
broker yet) is applied, timed to the Ready condition, and deleted with its claims. The acting
replica's RSS (VmRSS and VmHWM of PID 1 in its container) is read after the last round. The load
average is printed beside the figures: timing on a shared machine is noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "k8s"))
from kube import IMAGE, REPO, Kube, unavailable


def _ready(kube: Kube, ns: str, name: str) -> bool:
    resource = kube.json("-n", ns, "get", "kc", name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in resource.get("status", {}).get("conditions", []))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    reason = unavailable()
    if reason is not None:
        sys.exit(reason)
    kube = Kube()
    ns = f"kw-bench-{uuid.uuid4().hex[:6]}"
    repository, _, tag = IMAGE.rpartition(":")
    kube.kubectl("create", "namespace", ns)
    try:
        started = time.monotonic()
        kube.helm("install", "kraftwerk", str(REPO / "charts" / "kraftwerk"), "--namespace", ns, "--wait",
                  "--set", f"image.repository={repository}", "--set", f"image.tag={tag}",
                  "--set", "image.pullPolicy=Never")
        print(f"helm install --wait (2 replicas): {time.monotonic() - started:.1f} s")
        doc = yaml.safe_load((REPO / "examples" / "kraftcluster.yaml").read_text())
        doc["spec"]["nodePools"] = [p for p in doc["spec"]["nodePools"] if p["roles"] == ["controller"]]
        name = doc["metadata"]["name"]
        times = []
        for round_ in range(args.rounds):
            applied = time.monotonic()
            kube.kubectl("-n", ns, "apply", "-f", "-", stdin=yaml.safe_dump(doc))
            while not _ready(kube, ns, name):
                if time.monotonic() - applied > 600:
                    sys.exit("not Ready after 600 s")
                time.sleep(0.25)
            times.append(time.monotonic() - applied)
            print(f"round {round_ + 1}: kubectl apply -> Ready (3 engine controllers): {times[-1]:.1f} s"
                  f"   load average {os.getloadavg()[0]:.1f}")
            kube.kubectl("-n", ns, "delete", "kc", name, "--wait=true", "--timeout=180s")
            kube.kubectl("-n", ns, "delete", "pvc", "-l", f"kraftwerk.io/cluster={name}", "--wait=true",
                         "--timeout=180s")
            while kube.json("-n", ns, "get", "pods", "-l", f"kraftwerk.io/cluster={name}")["items"]:
                time.sleep(0.5)
        print(f"apply -> Ready: median {statistics.median(times):.1f} s, min {min(times):.1f} s, max {max(times):.1f} s")
        for pod in kube.json("-n", ns, "get", "pods", "-l", "app.kubernetes.io/component=operator")["items"]:
            pod_name = pod["metadata"]["name"]
            status = kube.kubectl("-n", ns, "exec", pod_name, "--", "cat", "/proc/1/status").stdout
            memory = {line.split(":")[0]: line.split(":")[1].strip() for line in status.splitlines()
                      if line.startswith(("VmRSS", "VmHWM"))}
            peering = [line for line in kube.kubectl("-n", ns, "logs", pod_name).stdout.splitlines()
                       if "Resuming operations" in line or "Pausing operations" in line]
            acted = bool(peering) and "Resuming" in peering[-1]
            print(f"operator pod {pod_name} ({'acting' if acted else 'standby'}): RSS {memory['VmRSS']}, "
                  f"peak {memory['VmHWM']}")
        print(f"load average {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    finally:
        kube.kubectl("-n", ns, "delete", "kc", "--all", "--wait=true", "--timeout=180s", check=False)
        kube.helm("uninstall", "kraftwerk", "--namespace", ns, "--wait", check=False)
        kube.kubectl("delete", "namespace", ns, "--wait=false", check=False)


if __name__ == "__main__":
    main()
