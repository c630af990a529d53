"""Long atheris runs over every parser a peer or a disk feeds (`tests/fuzz_targets.py`).

The test suite runs all targets together for a few thousand inputs with a fixed seed
(`tests/security/test_fuzzing.py`); this runs each target alone, coverage guided, for
`--seconds`, keeping its corpus in `--corpus/<target>/` so the next run starts where this one
stopped. Per target it prints the inputs run, the coverage reached (libFuzzer's `cov` and `ft`),
the corpus size, and any crash: the input is kept as `--corpus/crash-<target>-<sha1>`, printed in
base64, and belongs in `tests/security/test_fuzzing.py` as a regression once fixed.

    .venv/bin/python bench/fuzz.py --seconds 300
    .venv/bin/python bench/fuzz.py --targets requests,produce --seconds 3600 --corpus .fuzz-corpus

Prints figures; asserts nothing (a crash shows as `CRASH` and a non-zero exit).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _util import load_average, print_table

_HARNESS = Path(__file__).resolve().parent.parent / "tests" / "fuzz_targets.py"
_TARGETS = ("requests", "produce", "batches", "snapshot", "meta-properties")
_STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/")


def _seed_corpus(target: str, corpus: Path) -> None:
    """A new corpus directory starts from the harness's valid inputs."""
    if any(corpus.iterdir()):
        return
    sys.path.insert(0, str(_HARNESS.parent))
    import fuzz_targets

    for number, seed in enumerate(fuzz_targets.seeds(target)):
        (corpus / f"seed-{number}").write_bytes(seed)


def _run(target: str, *, seconds: int, corpus_root: Path, seed: int) -> list[str]:
    corpus = corpus_root / target
    corpus.mkdir(parents=True, exist_ok=True)
    _seed_corpus(target, corpus)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kraft-fuzz-") as scratch:
        run = subprocess.run(
            [sys.executable, str(_HARNESS), target, f"-max_total_time={seconds}", f"-seed={seed}", "-max_len=65536",
             f"-artifact_prefix={corpus_root}/crash-{target}-", str(corpus)],
            capture_output=True, text=True, check=False, env={**os.environ, "KRAFT_FUZZ_SCRATCH": scratch})
    elapsed = time.monotonic() - started
    output = run.stdout + run.stderr
    statuses = _STATUS.findall(output)
    runs, cov, ft, corp = statuses[-1] if statuses else ("0", "0", "0", "0")
    done = re.search(r"Done (\d+) runs", output)
    if done:
        runs = done.group(1)
    crash = re.search(r"Test unit written to (\S+)", output)
    if crash:
        print(f"CRASH in {target}: {crash.group(1)}")
        uncaught = output.find("Uncaught Python exception")
        print(output[uncaught:uncaught + 3000] if uncaught >= 0 else output[-3000:])
    return [target, runs, f"{int(runs) / elapsed:.0f}" if elapsed else "-", cov, ft, corp,
            "CRASH" if crash else ("ok" if run.returncode == 0 else f"rc={run.returncode}")]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--targets", default=",".join(_TARGETS), help="comma-separated, from " + ",".join(_TARGETS))
    parser.add_argument("--seconds", type=int, default=300, help="per target")
    parser.add_argument("--corpus", type=Path, default=Path(".fuzz-corpus"), help="kept between runs")
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    args = parser.parse_args()
    targets = [t for t in args.targets.split(",") if t]
    unknown = [t for t in targets if t not in _TARGETS]
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {','.join(_TARGETS)}")
    print(f"atheris, {args.seconds} s per target, seed {args.seed}, corpus {args.corpus}; "
          f"load average {load_average()}")
    rows = [_run(t, seconds=args.seconds, corpus_root=args.corpus, seed=args.seed) for t in targets]
    print_table(["target", "inputs", "inputs/s", "cov", "ft", "corpus", "result"], rows)
    print(f"load average {load_average()}")
    return 1 if any(row[-1] != "ok" for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
