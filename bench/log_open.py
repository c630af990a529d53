"""Log-open benchmark: how long a broker's partition log takes to open after a clean shutdown,
after a crash with a recent recovery checkpoint, and with no checkpoint at all, and how long its
idempotent-producer state takes to rebuild from a snapshot versus from the whole log.

Builds one partition log of `--gib` GiB (16 KiB idempotent batches, Kafka's 1 GiB segments by
default), closes it the way a clean shutdown does (flush, producer snapshot at the log end), then
times each way of opening it. Page cache: the script tries to drop it before each open (needs
root and a writable /proc/sys/vm/drop_caches) and says whether it could. Prints figures; asserts
nothing.

    .venv/bin/python bench/log_open.py --gib 2 [--segment-mib 1024] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

from crc32c import crc32c

from kraft_engine.records.batches import build_batch
from kraft_engine.server.replica_manager import Partition, _rebuild_producer_state, _write_producer_snapshot
from kraft_engine.storage.partition_log import PartitionLog

_BATCH_RECORDS = 16
_VALUE = b"v" * 1000


def _drop_caches() -> bool:
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def _idempotent_batch(sequence: int) -> bytes:
    data = bytearray(build_batch(base_offset=0, partition_leader_epoch=0, values=[_VALUE] * _BATCH_RECORDS,
                                 timestamp_ms=1_700_000_000_000))
    struct.pack_into(">qhi", data, 43, 1000, 0, sequence)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def _partition(log: PartitionLog) -> Partition:
    return Partition(topic="bench", index=0, topic_id=uuid.uuid4(), log=log, log_dir=log.directory.parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--segment-mib", type=int, default=1024)
    parser.add_argument("--dir", default=None, help="where to build the log (default: a temporary directory)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="log-open-", dir=args.dir))
    path = root / "bench-0"
    segment_bytes = args.segment_mib * 1024 * 1024
    try:
        log, _ = PartitionLog.open(path, segment_bytes=segment_bytes, allow_offset_gaps=True)
        batch_bytes = len(_idempotent_batch(0))
        batches = int(args.gib * 1024**3 / batch_bytes)
        started = time.perf_counter()
        sequence = 0
        for _ in range(batches):
            log.append_as_leader(_idempotent_batch(sequence), epoch=0)
            sequence += _BATCH_RECORDS
        log.flush()
        partition = _partition(log)
        _rebuild_producer_state(partition)
        _write_producer_snapshot(partition)
        end = log.log_end_offset
        log.close()
        size = sum(p.stat().st_size for p in path.glob("*.log"))
        print(f"built {size / 1024**3:.2f} GiB, {len(list(path.glob('*.log')))} segments, {end} records "
              f"in {time.perf_counter() - started:.1f} s; load average {os.getloadavg()[0]:.1f}")
        rows = []
        for name, kwargs in (
            ("clean shutdown marker", {"clean_shutdown": True}),
            ("crash, recovery point = log end", {"recovery_point": end}),
            ("crash, no recovery point", {}),
        ):
            cold = _drop_caches()
            began = time.perf_counter()
            opened, report = PartitionLog.open(path, segment_bytes=segment_bytes, allow_offset_gaps=True, **kwargs)  # type: ignore[arg-type]
            open_s = time.perf_counter() - began
            partition = _partition(opened)
            if name != "clean shutdown marker":
                for snapshot in path.glob("*.snapshot"):  # a crash-time rebuild without a snapshot at the end
                    snapshot.rename(snapshot.with_suffix(".hidden"))
            began = time.perf_counter()
            _rebuild_producer_state(partition)
            rebuild_s = time.perf_counter() - began
            for hidden in path.glob("*.hidden"):
                hidden.rename(hidden.with_suffix(".snapshot"))
            opened.close()
            rows.append((name, open_s, rebuild_s, report.after_clean_shutdown, len(report.validated_segments), cold))
        print(f"{'open':34} {'open s':>8} {'producer state s':>17}  clean-path  CRC-checked segments  cache dropped")
        for name, open_s, rebuild_s, clean, validated, cold in rows:
            print(f"{name:34} {open_s:8.3f} {rebuild_s:17.3f}  {clean!s:10}  {validated:20d}  {cold}")
        print(f"load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
