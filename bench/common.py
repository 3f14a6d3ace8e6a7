"""Shared pieces of the benchmark: results, timing, row generation, WAL prefill."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pyarrow as pa

from pyspark_durable.endpoint import open_namespace

ROW_BYTES = 100  # id (8 bytes) + payload (92 bytes)
PAYLOAD_BYTES = ROW_BYTES - 8
OUT = Path(__file__).resolve().parent / "out"
SCRATCH = [OUT]  # run.py points it at its own work dir, which it deletes at the end


def scratch_dir(prefix: str) -> str:
    """A fresh folder (checkpoint, parquet output) under the run's scratch dir, so it
    goes away with the run instead of piling up in bench/out/."""
    return tempfile.mkdtemp(prefix=prefix, dir=SCRATCH[0])


@dataclass
class Result:
    """One row of the results table."""

    pair: str
    ours: float | None
    peer: float | None
    unit: str
    target: str = ""          # e.g. ">= 0.7", "<= 0.5 s", "~1"
    ratio: float | None = None
    met: bool | None = None
    note: str = ""
    samples: dict[str, list[float]] = field(default_factory=dict)

    def ratio_str(self) -> str:
        return "" if self.ratio is None else f"{self.ratio:.2f}"


def median(values: list[float]) -> float:
    return statistics.median(values)


def higher_is_better(pair: str, ours: list[float], peer: list[float], unit: str,
                     target: float, note: str = "") -> Result:
    """ratio = median(ours) / median(peer), met when >= target."""
    o, p = median(ours), median(peer)
    ratio = o / p if p else None
    return Result(pair, o, p, unit, f">= {target}", ratio,
                  None if ratio is None else ratio >= target, note,
                  {"ours": ours, "peer": peer})


def reported(pair: str, ours: list[float], peer: list[float], unit: str,
             note: str = "") -> Result:
    """A ratio that explains the others (no target of its own)."""
    o, p = median(ours), median(peer)
    return Result(pair, o, p, unit, "report", o / p if p else None, None, note,
                  {"ours": ours, "peer": peer})


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


WARMUPS = [1]  # set by run.py --warmups
BROKER_PIDS: list[int] = []  # run.py: the JVMs of the Kafka brokers the run in progress uses
_TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """CPU seconds every process of the machine has used so far (/proc/stat, busy time)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = \
            (int(v) for v in f.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / _TICK


def broker_cpu_s() -> float:
    """CPU seconds the Kafka brokers of the run in progress have used so far (0 without)."""
    total = 0.0
    for pid in BROKER_PIDS:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def tree_cpu_s() -> float:
    """CPU seconds used so far by this process and every process below it: the Spark
    JVM, its Python workers, the broker run.py started (and whatever they have reaped,
    e.g. Spark's short-lived Python processes). Unlike ``machine_cpu_s`` it leaves out
    other people's processes on a shared machine."""
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        pid = int(name)
        parent[pid] = int(fields[1])
        cpu[pid] = sum(int(v) for v in fields[11:15]) / _TICK  # utime stime cutime cstime
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [os.getpid()]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo.extend(children.get(pid, ()))
    return total


@dataclass
class CpuMeter:
    """CPU seconds per call of a measured function (every round): the whole machine's,
    the bench's own process tree's (``tree_cpu_s``, broker included) and the broker's."""

    machine: list[float] = field(default_factory=list)
    tree: list[float] = field(default_factory=list)
    broker: list[float] = field(default_factory=list)

    def wrap(self, fn: Callable[[], float]) -> Callable[[], float]:
        def run() -> float:
            m0, t0, b0 = machine_cpu_s(), tree_cpu_s(), broker_cpu_s()
            value = fn()
            self.machine.append(machine_cpu_s() - m0)
            self.tree.append(tree_cpu_s() - t0)
            self.broker.append(broker_cpu_s() - b0)
            return value
        return run


def repeat(fns: dict[str, Callable[[], float]], reps: int) -> dict[str, list[float]]:
    """``WARMUPS`` warm-up rounds, then ``reps`` rounds; the order alternates every round."""
    out: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for rep in range(reps + WARMUPS[0]):
        order = names if rep % 2 == 0 else names[::-1]
        for name in order:
            value = fns[name]()
            if rep >= WARMUPS[0]:
                out[name].append(value)
    return out


def uid(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


_PAYLOAD_CACHE: dict[int, pa.Array] = {}


def make_rows(start: int, n: int) -> pa.Table:
    """``n`` rows of ~100 bytes: an int64 id and a 92-byte binary payload."""
    payload = _PAYLOAD_CACHE.get(n)
    if payload is None:
        rng = np.random.default_rng(n)
        raw = rng.integers(97, 123, size=n * PAYLOAD_BYTES, dtype=np.uint8).tobytes()
        offsets = np.arange(0, (n + 1) * PAYLOAD_BYTES, PAYLOAD_BYTES, dtype=np.int32)
        payload = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets),
                                                         pa.py_buffer(raw)])
        _PAYLOAD_CACHE[n] = payload
    ids = pa.array(np.arange(start, start + n, dtype=np.int64))
    return pa.table({"id": ids, "payload": payload})


@dataclass(frozen=True)
class Target:
    """Where a namespace lives: a file root, or Kafka brokers and the client to use.

    ``client`` is the Kafka backend's ``client`` option (``confluent`` or
    ``kafka-python``): it is part of the run, so every label says which client ran.
    """

    backend: str
    namespace: str
    path: str | None = None
    bootstrap: str | None = None
    client: str | None = None
    brokers: int = 1  # Kafka: the brokers of the cluster (topics replicated on up to 3)
    options: tuple[tuple[str, str], ...] = ()  # Kafka: store options of the run, e.g.
    # (("compression.type", "none"),): named in the label

    @property
    def label(self) -> str:
        """``file``, ``kafka/confluent`` or ``kafka/kafka-python`` (``, 3 brokers`` on a
        cluster): what the report shows."""
        name = f"{self.backend}/{self.client}" if self.client else self.backend
        name += "".join(f", {k}={v}" for k, v in self.options)
        return f"{name}, {self.brokers} brokers" if self.brokers > 1 else name

    @property
    def replication(self) -> int:
        """The replication factor of Kafka topics on this target's brokers."""
        return min(self.brokers, 3)

    def config(self) -> dict:
        opts: dict[str, str] = {"path": str(self.path)} if self.backend == "file" else \
            {"bootstrap_servers": str(self.bootstrap)}
        if self.client:
            opts["client"] = self.client
        opts.update(self.options)
        return {"backend": self.backend, "namespace": self.namespace, "options": opts}

    def spark_options(self) -> dict[str, str]:
        opts = {"backend": self.backend, "namespace": self.namespace}
        if self.backend == "file":
            opts["path"] = str(self.path)
        else:
            opts["kafka.bootstrap.servers"] = str(self.bootstrap)
        if self.client:
            opts["kafka.client"] = self.client
        opts.update((f"kafka.{k}", v) for k, v in self.options)
        return opts

    def with_namespace(self, namespace: str) -> Target:
        return replace(self, namespace=namespace)


def prefill_steps(total_rows: int, rows_per_step: int,
                  regions: int = 2) -> Iterator[list[tuple[int, pa.Table]]]:
    """The rows of each prefill step as (region, table) pairs: one definition of "the
    same rows" for the WAL (``prefill``) and for the parquet peer (``write_parquet``)."""
    written = 0
    while written < total_rows:
        n = min(rows_per_step, total_rows - written)
        per = -(-n // regions)
        yield [(r, make_rows(written + r * per, min(per, n - r * per)))
               for r in range(regions) if n - r * per > 0]
        written += n


def write_parquet(folder: Path, total_rows: int, rows_per_step: int, regions: int = 2) -> None:
    """The rows ``prefill`` commits, as one parquet file per region (snappy, Spark's
    default), so Spark's file source reads them in ``regions`` partitions like the WAL."""
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    per_region: list[list[pa.Table]] = [[] for _ in range(regions)]
    for step in prefill_steps(total_rows, rows_per_step, regions):
        for r, rows in step:
            per_region[r].append(rows)
    for r, tables in enumerate(per_region):
        if tables:
            pq.write_table(pa.concat_tables(tables), folder / f"part-{r:05d}.parquet",
                           compression="snappy")


def prefill(target: Target, total_rows: int, rows_per_step: int, regions: int = 2) -> int:
    """Commit ``total_rows`` rows as steps of ``rows_per_step`` rows spread over ``regions``
    (table ``t{r}`` in region ``r``, so a Spark read has one partition per region).
    Returns the bytes of row data written."""
    ns = open_namespace(target.config())
    try:
        nbytes = 0
        for step, parts in enumerate(prefill_steps(total_rows, rows_per_step, regions)):
            attempt = ns.begin("prefill", step)
            for r, rows in parts:
                nbytes += rows.nbytes
                attempt.write(f"t{r}", rows, r)
            attempt.commit()
        return nbytes
    finally:
        ns.close()
