"""The suite's xdist scheduling (tests/xdist_scheduling.py): real pytest-xdist workers run a small
tree laid out like ours, and every module's tests, and the whole Kubernetes tier, ran on one worker
in their written order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from xdist_scheduling import K8S_SCOPE, scope_of

_RECORDING_TEST = '''
import json, os, pathlib
def _record(name):
    with open(os.environ["RECORD_TO"], "a") as out:
        out.write(json.dumps([__name__, name, os.environ.get("PYTEST_XDIST_WORKER")]) + "\\n")
''' + "".join(f"def test_{i}():\n    _record({i})\n" for i in range(6))

_CONFTEST = '''
import pytest
from xdist_scheduling import ModuleScheduling

@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    return ModuleScheduling(config, log)
'''


def test_the_scope_is_the_module_or_the_kubernetes_tier() -> None:
    assert scope_of("tests/process/test_x.py::test_a[1-2]") == "tests/process/test_x.py"
    assert scope_of("tests/test_y.py::TestZ::test_b") == "tests/test_y.py"
    assert scope_of("tests/k8s/test_operator.py::test_c") == K8S_SCOPE
    assert scope_of("tests/k8s/test_lifecycle.py::test_d") == K8S_SCOPE


def test_real_workers_keep_each_module_and_the_kubernetes_tier_on_one_worker_in_order(tmp_path: Path) -> None:
    tests = tmp_path / "tests"
    (tests / "k8s").mkdir(parents=True)
    (tests / "conftest.py").write_text(_CONFTEST)
    modules = ["tests/test_alpha.py", "tests/test_beta.py", "tests/test_gamma.py",
               "tests/k8s/test_one.py", "tests/k8s/test_two.py"]
    for module in modules:
        (tmp_path / module).write_text(_RECORDING_TEST)
    record = tmp_path / "record.jsonl"
    env = {**os.environ, "RECORD_TO": str(record),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "-p", "no:cacheprovider", "-q", "-W", "error", "-p", "no:asyncio", "-p", "no:hypothesispytest",
         "--rootdir", str(tmp_path), "-c", os.devnull, *modules],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 6 * len(modules)
    workers_by_scope: dict[str, set[str]] = {}
    order_by_module: dict[str, list[int]] = {}
    for module, index, worker in runs:
        scope = K8S_SCOPE if module.startswith("test_one") or module.startswith("test_two") else module
        workers_by_scope.setdefault(scope, set()).add(worker)
        order_by_module.setdefault(module, []).append(index)
    assert all(len(workers) == 1 for workers in workers_by_scope.values()), workers_by_scope
    assert all(order == list(range(6)) for order in order_by_module.values()), order_by_module
