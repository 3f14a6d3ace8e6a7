"""Pair 5 (peak RSS of Spark's Python workers vs namespace size) and 6a (region reopen).

RSS is read from /proc (no psutil): a thread samples ``VmRSS`` and ``VmHWM`` of every
process below this one whose command line holds ``pyspark.daemon`` or
``pyspark.worker`` (Spark's Python workers, children of the JVM), every 20 ms. Before
a measured read, the workers' peak (VmHWM) is reset through ``/proc/<pid>/clear_refs``
so an earlier pair's peak does not count.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from common import Result, Target, median, prefill, uid
from pyspark.sql import SparkSession

from pyspark_durable.endpoint import open_namespace
from pyspark_durable.log.file import FileLogStore

SAMPLE_S = 0.02
MARKERS = (b"pyspark.daemon", b"pyspark.worker")


def _ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _descends_from(pid: int, ancestor: int) -> bool:
    while pid > 1:
        if pid == ancestor:
            return True
        pid = _ppid(pid)
    return False


def python_workers() -> list[int]:
    """Spark's Python worker processes started by this process (through its JVM)."""
    me, out = os.getpid(), []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
            if any(m in cmd for m in MARKERS) and _descends_from(pid, me):
                out.append(pid)
        except (OSError, ValueError, IndexError):
            continue
    return out


def _status_kb(pid: int) -> tuple[int, int]:
    rss = hwm = 0
    with open(f"/proc/{pid}/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmRSS:"):
                rss = int(line.split()[1])
            elif line.startswith(b"VmHWM:"):
                hwm = int(line.split()[1])
    return rss, hwm


class RssSampler:
    """Peak RSS (MB) of Spark's Python workers while the ``with`` block runs."""

    def __init__(self) -> None:
        self.peak_kb: dict[int, int] = {}
        self.first_kb: dict[int, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for pid in python_workers():
            try:
                rss, hwm = _status_kb(pid)
            except OSError:
                continue
            self.first_kb.setdefault(pid, rss)
            self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), rss, hwm)
        self.samples += 1

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            self._sample()

    def __enter__(self) -> RssSampler:
        for pid in python_workers():
            try:  # 5 = reset the peak resident set size (VmHWM) to the current RSS
                with open(f"/proc/{pid}/clear_refs", "w") as f:
                    f.write("5")
            except OSError:
                pass
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    @property
    def peak_mb(self) -> float:
        return max(self.peak_kb.values(), default=0) / 1024

    def detail(self) -> str:
        return ", ".join(f"{pid}: {self.first_kb[pid] // 1024}->{kb // 1024}"
                         for pid, kb in sorted(self.peak_kb.items()))

    @property
    def workers(self) -> int:
        return len(self.peak_kb)


def memory_pair(spark: SparkSession, base: Target, sizes_mb: tuple[int, int], reps: int,
                log: Callable[[str], None]) -> tuple[Result, Target]:
    """Batch read of namespaces of two sizes → noop; peak worker RSS of each."""
    targets = []
    for mb in sizes_mb:
        t = base.with_namespace(uid(f"mem{mb}m"))
        start = time.perf_counter()
        written = prefill(t, mb * 10_000, rows_per_step=100_000, regions=1)
        log(f"  prefilled {written / 1e6:,.0f} MB in {time.perf_counter() - start:.1f}s")
        targets.append(t)
    peaks: dict[int, list[float]] = {mb: [] for mb in sizes_mb}
    for rep in range(reps + 1):
        for mb, t in zip(sizes_mb, targets, strict=True):
            df = spark.read.format("durablewal").options(**t.spark_options()).load()
            with RssSampler() as sampler:
                start = time.perf_counter()
                df.write.format("noop").mode("overwrite").save()
                secs = time.perf_counter() - start
            log(f"  read {mb} MB: {secs:.1f}s, peak worker RSS {sampler.peak_mb:.0f} MB "
                f"({sampler.workers} workers, {sampler.samples} samples; "
                f"pid: first->peak MB {sampler.detail()})")
            if rep:
                peaks[mb].append(sampler.peak_mb)
    small, big = (median(peaks[mb]) for mb in sizes_mb)
    ratio = big / small if small else None
    return Result(f"5 memory [{base.backend}]: peak worker RSS, {sizes_mb[1]} MB vs "
                  f"{sizes_mb[0]} MB namespace", big, small, "MB", "~1 (<= 1.5)", ratio,
                  None if ratio is None else ratio <= 1.5,
                  "batch read → noop; max over Python workers of peak RSS",
                  {"ours": peaks[sizes_mb[1]], "peer": peaks[sizes_mb[0]]}), targets[0]


def recovery_pair(target: Target, reps: int, log: Callable[[str], None]) -> Result:
    """Reopen the region of ``target`` (FileLogStore + high watermark + Namespace)."""
    size = sum(f.stat().st_size for f in
               (FileLogStore(target.namespace, path=target.path).folder / "region_0").iterdir())
    opens, recovers = [], []
    for rep in range(reps + 1):
        start = time.perf_counter()
        store = FileLogStore(target.namespace, path=target.path)
        high = store.open_region(0, create=False).high_watermark()
        opened = time.perf_counter()
        ns = open_namespace(target.config())
        steps = ns.steps()
        done = time.perf_counter()
        ns.close()
        store.close()
        if rep:
            opens.append(opened - start)
            recovers.append(done - opened)
    log(f"  reopen {size / 1e6:.0f} MB region ({high} entries, {len(steps)} steps): "
        f"log {opens} namespace {recovers}")
    total = [a + b for a, b in zip(opens, recovers, strict=True)]
    return Result(f"6a reopen [{target.backend}]: {size / 1e6:,.0f} MB region", median(total),
                  None, "s", "report", None, None,
                  f"log open + high watermark {median(opens):.3f}s, namespace recovery "
                  f"{median(recovers):.3f}s (warm page cache)", {"ours": total})
