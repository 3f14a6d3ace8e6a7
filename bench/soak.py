"""A soak of a streaming writer with retention and a holding reader on the file log.

Does memory, file descriptors or the WAL grow when both queries run for an hour? The
Spark application runs in a child process (``--child``) that this script starts, with
a fixed driver heap (``spark.driver.memory``, ``--xmx``: it must be set before the
driver JVM starts), so the sampler stays outside the processes it measures:

- the writer: Spark's ``rate`` source (``--rows-per-second``, 2 partitions), each row an
  ``id`` and a payload derived from it (``row-<id>-<sha1(id)>``), into
  ``writeStream.format("durablewal")`` with ``retentionSteps``, a cleaner pass every
  ``cleanIntervalMs`` from its driver and a processing-time trigger;
- the reader: ``readStream.format("durablewal")`` with ``readerId`` and
  ``holdRetention`` (retention waits for it) into Spark's parquet sink, its own
  checkpoint and trigger.

Every ``--sample-s`` seconds one JSON line goes to ``bench/out/soak-<time>.jsonl``: the
driver JVM's heap used and committed, old generation and metaspace, GC counts
(``jstat -gc``: it reads the JVM's hsperfdata, so it neither attaches nor stops the
JVM, and needs no code in the measured process), its committed memory by Native Memory
Tracking category (``jcmd VM.native_memory summary``; ``--no-nmt`` runs without NMT),
the JVM's RSS, threads and open fds,
the Python driver's RSS and fds, Spark's Python processes below the JVM (the
``pyspark.daemon``, its workers, the streaming source and sink runners: RSS summed, fds
summed), the WAL folder's bytes, allocated bytes and files, the retained steps and the
reader's next step, and the rows each query has processed (its progress events,
counted by the child).

At the end the child stops the writer, lets the reader catch up, stops it and checks
the output by content: every id once, the ids exactly ``0..N-1`` where N is what the
committed steps hold, every payload matching its id, every committed step read and
holding a contiguous id range, and retention having expired steps. A verdict line is
printed; the exit code is 1 if it fails. ``bench/RESULTS-soak.md`` (``--results``) gets
the environment, every sample, first/last/max and the trend of each series, and
``results-soak.png`` beside it when matplotlib is installed.

    python bench/soak.py                      # 60 minutes, a sample a minute
    python bench/soak.py --minutes 10
    python bench/soak.py --minutes 1.5 --sample-s 5 --results bench/out/smoke.md
    python bench/soak.py --report-from bench/out/soak-20261127T062500.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"
NAMESPACE = "soak"
READER_ID = "soak-copy"
READ_SCHEMA = "id long, payload string, _step long"
CONNECT_BACK = "Python worker failed to connect back"
MAX_RESTARTS = 10
STATUS_EVERY_S = 5.0  # how often the child writes its row counts (progress keeps 100 events)


# -- the Spark application (child process) --------------------------------------------


def payload_expr(col: Any) -> Any:
    """A row's payload as a Spark expression of its id: its content proves which row it is."""
    from pyspark.sql import functions as F

    return F.concat(F.lit("row-"), col.cast("string"), F.lit("-"), F.sha1(col.cast("string")))


def wal_options(run: Path, args: argparse.Namespace) -> dict[str, str]:
    # Small segments, so retention deletes whole files within minutes (the default is
    # 1/64 of the disk, up to 64 MiB: a 10-minute run would never roll one).
    return {"namespace": NAMESPACE, "path": str(run / "wal"),
            "file.segment_size_bytes": str(args.segment_bytes)}


def wal_config(run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The same WAL as ``wal_options``, for the Python API (``open_namespace``)."""
    return {"backend": "file", "namespace": NAMESPACE,
            "options": {"path": str(run / "wal"), "segment_size_bytes": args.segment_bytes}}


def write_json(path: Path, value: dict) -> None:
    """Replace ``path`` whole, so the sampler never reads half a file."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class RowCounter:
    """Rows of every completed micro-batch of a query, from its recent progress events
    (Spark keeps the last 100, so polling every few seconds misses none)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.rows: dict[int, int] = {}

    def poll(self) -> None:
        for p in self.query.recentProgress:
            batch, n = int(p["batchId"]), int(p["numInputRows"])
            self.rows[batch] = max(n, self.rows.get(batch, 0))

    def total(self) -> int:
        return sum(self.rows.values())

    def batches(self) -> int:
        return sum(1 for n in self.rows.values() if n)


def verify(spark: Any, run: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Read the reader's output back by content against what the writer committed."""
    from pyspark.sql import functions as F

    from pyspark_durable.endpoint import open_namespace, read_steps

    ns = open_namespace(wal_config(run, args), create=False)
    try:
        steps = ns.steps()
        last = read_steps(ns, "default", start=steps.stop - 1) if steps.stop else None
        expected = max(last.column("id").to_pylist()) + 1 if last is not None else 0
    finally:
        ns.close()
    out = spark.read.parquet(str(run / "out"))
    agg = out.agg(F.count("*").alias("rows"), F.countDistinct("id").alias("ids"),
                  F.min("id").alias("lo"), F.max("id").alias("hi"),
                  F.sum(F.when(F.col("payload") == payload_expr(F.col("id")), 0)
                        .otherwise(1)).alias("bad")).first()
    per_step = sorted(tuple(r) for r in out.groupBy("_step").agg(
        F.min("id"), F.max("id"), F.count("*")).collect())
    gaps = [s for s, lo, hi, n in per_step if hi - lo + 1 != n]
    breaks = [b[0] for a, b in itertools.pairwise(per_step) if a[2] + 1 != b[1]]
    rows, ids, lo, hi, bad = agg["rows"], agg["ids"], agg["lo"], agg["hi"], agg["bad"] or 0
    problems = []
    if rows != ids:
        problems.append(f"{rows - ids} rows delivered more than once")
    if ids != expected or (rows and (lo != 0 or hi != expected - 1)):
        problems.append(f"ids {lo}..{hi} ({ids} distinct) instead of 0..{expected - 1}")
    if bad:
        problems.append(f"{bad} payloads do not match their id")
    if [s for s, *_ in per_step] != list(range(steps.stop)):
        problems.append(f"steps read {len(per_step)}, committed [0, {steps.stop})")
    if gaps or breaks:
        problems.append(f"steps without a contiguous id range: {(gaps + breaks)[:10]}")
    if steps.start == 0:
        problems.append("retention expired no step: the hold was never tested")
    return {"ok": not problems, "problems": problems, "rows": rows, "distinct_ids": ids,
            "committed_rows": expected, "steps": [steps.start, steps.stop]}


def one_line(error: str) -> str:
    """A query's failure in one line: Spark's first line and, when a Python traceback
    follows, the exception that ended it."""
    lines = [line for line in error.splitlines() if line.strip()]
    if not lines:
        return error
    raised = [line for line in lines[1:] if re.match(r"[\w.]+: ", line)]
    return lines[0] + (f" ... {raised[-1]}" if raised else "")


def child(args: argparse.Namespace) -> int:
    """The Spark application: both queries until SIGTERM, then the check."""
    from pyspark.sql import functions as F

    import pyspark_durable
    from pyspark_durable.endpoint import open_namespace
    from pyspark_durable.showcase.session import local_session

    run = Path(args.run_dir)
    status_path, verdict_path = run / "status.json", run / "verdict.json"
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log4j = resources.files("pyspark_durable") / "resources" / "log4j2.properties"
    java_opts = f"-Dlog4j2.configurationFile=file:{log4j}"  # local_session's, kept
    if args.nmt:
        java_opts += " -XX:NativeMemoryTracking=summary"
    spark = local_session("durablewal-soak", **{"spark.driver.memory": args.xmx,
                                                 "spark.driver.extraJavaOptions": java_opts})
    try:
        # Spark's workers must import this checkout's package, as the driver does
        worker_pkg = spark.sparkContext.parallelize([0], 1).map(
            lambda _: __import__("pyspark_durable").__file__).first()
        wal = wal_options(run, args)
        # the namespace exists before the reader starts: a stream read of a namespace
        # that is not there fails as it plans (the writer creates it only at its first
        # commit)
        open_namespace(wal_config(run, args)).close()
        rows = (spark.readStream.format("rate").option("rowsPerSecond", args.rows_per_second)
                .option("numPartitions", 2).load()
                .select(F.col("value").alias("id"),
                        payload_expr(F.col("value")).alias("payload")))
        # the reader starts before the table exists, hence its schema
        copy = (spark.readStream.format("durablewal").schema(READ_SCHEMA).options(**wal)
                .option("readerId", READER_ID).option("holdRetention", "true").load())
        starts = {
            "writer": lambda: (
                rows.writeStream.format("durablewal").options(**wal)
                .option("retentionSteps", args.retention_steps)
                .option("cleanIntervalMs", args.clean_interval_ms)
                .option("cleanGraceMs", args.clean_grace_ms)
                .option("checkpointLocation", str(run / "ckpt-writer"))
                .queryName("soak-writer")
                .trigger(processingTime=f"{args.writer_trigger_s} seconds").start()),
            "reader": lambda: (
                copy.writeStream.format("parquet")
                .option("checkpointLocation", str(run / "ckpt-reader"))
                .queryName("soak-reader")
                .trigger(processingTime=f"{args.reader_trigger_s} seconds")
                .start(str(run / "out"))),
        }
        counters = {name: RowCounter(start()) for name, start in starts.items()}
        restarts: list[str] = []
        failed: list[str] = []  # one line per query failure that ends the soak

        def status(phase: str) -> None:
            for c in counters.values():
                c.poll()
            write_json(status_path, {
                "phase": phase, "driver_pid": os.getpid(), "package": pyspark_durable.__file__,
                "worker_package": worker_pkg, "failed": failed, "restarts": restarts,
                **{f"{k}_rows": c.total() for k, c in counters.items()},
                **{f"{k}_batches": c.batches() for k, c in counters.items()}})

        def revive(name: str, error: str) -> bool:
            """Restart a query that failed because one of Spark's Python processes did not
            connect back in its fixed 10 s (a loaded machine): a restart from the
            checkpoint is what a production job does, and exactly-once must survive it.
            Any other failure fails the soak."""
            if CONNECT_BACK in error and len(restarts) < MAX_RESTARTS:
                restarts.append(f"{name} at {time.strftime('%H:%M:%S')}")
                counters[name].query = starts[name]()
                return True
            failed.append(f"soak-{name}: {one_line(error)}")
            return False

        status("running")
        while not stop.wait(STATUS_EVERY_S) and not failed:
            for name, c in counters.items():
                if not c.query.isActive:
                    c.poll()  # its last batches, before the query object is replaced
                    revive(name, str(c.query.exception()))
            status("running")
        status("stopping")
        writer = counters["writer"].query
        writer.stop()
        if writer.exception() is not None and not failed:
            failed.append(f"soak-writer: {one_line(str(writer.exception()))}")
        while not failed:  # the reader reads every committed step, the last ones included
            reader = counters["reader"].query
            try:
                if reader.isActive:
                    reader.processAllAvailable()
                    break
                error = str(reader.exception())
            except Exception as exc:  # noqa: BLE001 - a connect-back timeout, or the failure
                error = str(exc)
            counters["reader"].poll()
            revive("reader", error)
        counters["reader"].query.stop()
        status("checking")
        try:
            verdict = verify(spark, run, args)
        except Exception as exc:  # noqa: BLE001 - reported as the verdict, never hidden
            verdict = {"ok": False, "problems": [f"the check failed: {exc}"]}
        if failed:
            verdict["ok"] = False
            verdict["problems"] = failed + verdict["problems"]
        verdict["restarts"] = restarts
        write_json(verdict_path, verdict)
        return 0 if verdict["ok"] else 1
    finally:
        spark.stop()


# -- the sampler (this process) -------------------------------------------------------


def proc_tree() -> dict[int, list[int]]:
    """Children of every process, from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(name))
    return children


def descendants(pid: int, tree: dict[int, list[int]]) -> Iterator[int]:
    todo = list(tree.get(pid, ()))
    while todo:
        p = todo.pop()
        yield p
        todo.extend(tree.get(p, ()))


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def find_jvm(driver: int) -> int | None:
    """The driver JVM: the java process PySpark's gateway started below the child."""
    tree = proc_tree()
    for pid in descendants(driver, tree):
        cmd = cmdline(pid)
        if cmd and os.path.basename(cmd[0]) == "java":
            return pid
    return None


def python_below(jvm: int) -> list[int]:
    """Spark's Python processes: the daemon, its forked workers, the streaming source and
    sink runners, whatever the JVM started (they run this interpreter)."""
    exe = os.path.realpath(sys.executable)
    out = []
    for pid in descendants(jvm, proc_tree()):
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == exe:
                out.append(pid)
        except OSError:
            continue
    return out


def roles(pids: list[int]) -> dict[str, list[float]]:
    """Spark's Python processes by what they run (``-m`` module and argument; a worker
    forked by a daemon carries its command line, hence "forked"): [count, RSS MB, fds]."""
    out: dict[str, list[float]] = {}
    members = set(pids)
    tree = proc_tree()
    parent = {c: p for p, cs in tree.items() for c in cs}
    for pid in pids:
        cmd = cmdline(pid)
        role = " ".join(cmd[cmd.index("-m") + 1:]) if "-m" in cmd else " ".join(cmd[1:])
        if parent.get(pid) in members:
            role += " (forked)"
        got = out.setdefault(role.removeprefix("pyspark."), [0, 0.0, 0])
        got[0] += 1
        got[1] = round(got[1] + status_fields(pid)["VmRSS"] / 1024, 1)
        got[2] += fd_count(pid)
    return out


def status_fields(pid: int) -> dict[str, int]:
    """VmRSS (kB) and Threads of a process (0 when it is gone)."""
    got = {"VmRSS": 0, "Threads": 0}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key = line.split(":", 1)[0]
                if key in got:
                    got[key] = int(line.split()[1])
    except OSError:
        pass
    return got


def fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def jstat_gc(pid: int) -> dict[str, float]:
    """``jstat -gc``'s columns (capacities and usage in kB, GC counts and seconds)."""
    res = subprocess.run(["jstat", "-gc", str(pid)], capture_output=True, text=True,
                         timeout=60, check=False)
    lines = res.stdout.split("\n")
    if res.returncode or len(lines) < 2:
        return {}
    values = [float(v) if v != "-" else 0.0 for v in lines[1].split()]
    return dict(zip(lines[0].split(), values, strict=False))


def wal_size(path: Path) -> tuple[int, int, int]:
    """Bytes (apparent), bytes allocated (punched holes excluded) and files of a folder."""
    size = blocks = files = 0
    for root, _dirs, names in os.walk(path):
        for name in names:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue  # deleted by a cleaner meanwhile
            size += st.st_size
            blocks += st.st_blocks * 512
            files += 1
    return size, blocks, files


def wal_steps(run: Path, args: argparse.Namespace) -> tuple[int, int, int]:
    """Retained steps [first, next) and the reader's next step (-1: not there yet)."""
    from pyspark_durable.endpoint import open_namespace

    try:
        ns = open_namespace(wal_config(run, args), create=False)
    except Exception:  # noqa: BLE001 - the writer has not created it yet
        return -1, -1, -1
    try:
        steps = ns.steps()
        reader = ns.info.readers().get(READER_ID)
        return steps.start, steps.stop, reader.next_step if reader else -1
    finally:
        ns.close()


def read_status(run: Path) -> dict[str, Any]:
    try:
        return json.loads((run / "status.json").read_text())
    except (OSError, ValueError):
        return {}


MB = 1024 * 1024


def sample(t_s: float, driver: int, jvm: int, run: Path, args: argparse.Namespace) -> dict:
    """One sample of every series."""
    gc = jstat_gc(jvm)
    workers = python_below(jvm)
    w_status = [status_fields(p) for p in workers]
    wal_bytes, wal_alloc, wal_files = wal_size(run / "wal")
    first, nxt, reader_next = wal_steps(run, args)
    st = read_status(run)
    jvm_status, drv_status = status_fields(jvm), status_fields(driver)
    kb = 1024
    return {
        "kind": "sample", "t_s": round(t_s, 1),
        "wall": datetime.now(UTC).strftime("%H:%M:%S"),
        "heap_used_mb": round(sum(gc.get(k, 0) for k in ("S0U", "S1U", "EU", "OU")) / kb, 1),
        "heap_committed_mb": round(sum(gc.get(k, 0) for k in ("S0C", "S1C", "EC", "OC")) / kb, 1),
        "old_used_mb": round(gc.get("OU", 0) / kb, 1),
        "metaspace_mb": round(gc.get("MU", 0) / kb, 1),
        "young_gcs": int(gc.get("YGC", 0)), "full_gcs": int(gc.get("FGC", 0)),
        "gc_s": round(gc.get("GCT", 0), 2),
        "jvm_rss_mb": round(jvm_status["VmRSS"] / kb, 1), "jvm_threads": jvm_status["Threads"],
        "jvm_fds": fd_count(jvm),
        "driver_py_rss_mb": round(drv_status["VmRSS"] / kb, 1), "driver_py_fds": fd_count(driver),
        "workers_py_rss_mb": round(sum(s["VmRSS"] for s in w_status) / kb, 1),
        "workers_py_n": len(workers), "workers_py_fds": sum(fd_count(p) for p in workers),
        "wal_mb": round(wal_bytes / MB, 2), "wal_alloc_mb": round(wal_alloc / MB, 2),
        "wal_files": wal_files, "steps_first": first, "steps_next": nxt,
        "reader_next": reader_next,
        "rows_written": st.get("writer_rows", 0), "rows_read": st.get("reader_rows", 0),
        "load1": round(os.getloadavg()[0], 2), "workers_by_role": roles(workers),
        "nmt_mb": native_memory(jvm) if args.nmt else {},
    }


def jvm_facts(jvm: int) -> dict[str, str]:
    """The heap limit and the collector the driver JVM really runs with."""
    flags = subprocess.run(["jcmd", str(jvm), "VM.flags"], capture_output=True, text=True,
                           timeout=60, check=False).stdout
    max_heap = re.search(r"-XX:MaxHeapSize=(\d+)", flags)
    gc = re.search(r"-XX:\+Use(\w+GC)\b", flags)
    xmx = [a for a in cmdline(jvm) if a.startswith("-Xmx")]
    return {"max_heap_mb": str(int(max_heap.group(1)) // MB) if max_heap else "?",
            "gc": gc.group(1) if gc else "?", "xmx_arg": xmx[-1] if xmx else "none"}


NMT_LINE = re.compile(r"^-\s+(.+?) \(reserved=(\d+)KB, committed=(\d+)KB\)")


def native_memory(jvm: int) -> dict[str, float]:
    """The JVM's committed memory by Native Memory Tracking category (MB), which says
    where an RSS that grows goes: heap, metaspace (Class), threads, code, GC, malloc."""
    res = subprocess.run(["jcmd", str(jvm), "VM.native_memory", "summary"],
                         capture_output=True, text=True, timeout=60, check=False)
    out: dict[str, float] = {}
    for line in res.stdout.splitlines():
        line = line.strip()
        if line.startswith("Total: reserved="):
            out["Total"] = round(int(re.findall(r"committed=(\d+)KB", line)[0]) / 1024, 1)
        elif m := NMT_LINE.match(line):
            out[m.group(1)] = round(int(m.group(3)) / 1024, 1)
    return out


def live_heap_mb(jvm: int) -> float | None:
    """Heap used right after a full GC (``jcmd GC.run``): the live set. Only at the end,
    since a forced GC during the run would change what the soak measures."""
    subprocess.run(["jcmd", str(jvm), "GC.run"], capture_output=True, timeout=120, check=False)
    gc = jstat_gc(jvm)
    return round(sum(gc.get(k, 0) for k in ("S0U", "S1U", "EU", "OU")) / 1024, 1) if gc else None


def environment(args: argparse.Namespace) -> dict[str, str]:
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                          check=False).stderr.split("\n")[0]
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--",
                            "pyspark_durable"], capture_output=True, text=True,
                           check=False).stdout.strip()
    return {"python": platform.python_version(), "pyspark": pyspark.__version__,
            "java": java.replace('"', ""), "commit": head + (" (+ local changes)" if dirty else ""),
            "cores": str(os.cpu_count()), "started": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")}


def command_line(args: argparse.Namespace) -> str:
    parts = ["python bench/soak.py", f"--minutes {args.minutes:g}"]
    defaults = build_parser().parse_args([])
    for key in ("sample_s", "xmx", "rows_per_second", "writer_trigger_s", "reader_trigger_s",
                "retention_steps", "clean_interval_ms", "clean_grace_ms", "segment_bytes"):
        if getattr(args, key) != getattr(defaults, key):
            parts.append(f"--{key.replace('_', '-')} {getattr(args, key)}")
    return " ".join(parts + ([] if args.nmt else ["--no-nmt"]))


def soak(args: argparse.Namespace) -> int:
    """Start the child, sample it, stop it, report."""
    OUT.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    run = OUT / f"soak-{stamp}"
    run.mkdir()
    samples_path = OUT / f"soak-{stamp}.jsonl"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable}
    child_args = [sys.executable, str(Path(__file__).resolve()), "--child", "--run-dir", str(run),
                  *(f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
                    if k not in ("child", "run_dir", "report_from", "results", "keep", "minutes",
                                 "nmt")),
                  *([] if args.nmt else ["--no-nmt"])]
    meta = {"kind": "meta", "command": command_line(args), "args": vars(args),
            "load_start": os.getloadavg(), **environment(args)}
    print(f"soak: {meta['command']}; samples -> {samples_path}", flush=True)
    # its own session: a Ctrl-C on the terminal reaches this process only, which then
    # stops the child the orderly way
    proc = subprocess.Popen(child_args, env=env, start_new_session=True)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # a SIGTERM stops the child the same orderly way

    signal.signal(signal.SIGTERM, interrupted)
    code = None
    out = samples_path.open("a")

    def record(value: dict) -> None:
        out.write(json.dumps(value) + "\n")
        out.flush()

    try:
        deadline = time.monotonic() + 600
        while read_status(run).get("phase") != "running" or find_jvm(proc.pid) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Spark child did not start (exit code {proc.poll()})")
            time.sleep(1)
        jvm = find_jvm(proc.pid)
        assert jvm is not None
        st = read_status(run)
        meta.update(jvm_facts(jvm), driver_pid=proc.pid, jvm_pid=jvm,
                    package=st.get("package"), worker_package=st.get("worker_package"))
        record(meta)
        print(f"soak: driver Python {proc.pid}, JVM {jvm} ({meta['xmx_arg']}, "
              f"{meta['gc']}); package {meta['package']}, in workers "
              f"{meta['worker_package']}", flush=True)
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        n = 0
        try:
            while True:
                s = sample(time.monotonic() - t0, proc.pid, jvm, run, args)
                record(s)
                print(f"soak: {s['t_s'] / 60:5.1f} min  heap {s['heap_used_mb']:.0f}/"
                      f"{s['heap_committed_mb']:.0f} MB  JVM RSS {s['jvm_rss_mb']:.0f} MB  "
                      f"Python driver {s['driver_py_rss_mb']:.0f} MB, workers "
                      f"{s['workers_py_rss_mb']:.0f} MB ({s['workers_py_n']})  fds "
                      f"{s['jvm_fds']}/{s['driver_py_fds']}/{s['workers_py_fds']}  WAL "
                      f"{s['wal_mb']:.1f} MB in {s['wal_files']} files, steps "
                      f"[{s['steps_first']}, {s['steps_next']}) reader at "
                      f"{s['reader_next']}  rows {s['rows_written']:,} -> {s['rows_read']:,}",
                      flush=True)
                if read_status(run).get("failed") or proc.poll() is not None:
                    print("soak: a query failed or the child exited; stopping", flush=True)
                    break
                n += 1
                next_at = min(t0 + n * args.sample_s, end)
                if time.monotonic() >= end - 0.5:
                    break
                time.sleep(max(0.0, next_at - time.monotonic()))
        except KeyboardInterrupt:
            print("soak: interrupted; stopping the queries", flush=True)
        if proc.poll() is None:
            record({"kind": "live_heap", "t_s": round(time.monotonic() - t0, 1),
                    "heap_after_full_gc_mb": live_heap_mb(jvm)})
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=1800)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        try:
            verdict = json.loads((run / "verdict.json").read_text())
        except (OSError, ValueError):
            verdict = {"ok": False, "problems": [f"no verdict: the child exited with {code}"]}
        status = read_status(run)
        verdict.update(kind="verdict", exit_code=code, load_end=os.getloadavg(),
                       writer_batches=status.get("writer_batches"),
                       reader_batches=status.get("reader_batches"))
        record(verdict)
        out.close()
        if not args.keep:
            shutil.rmtree(run, ignore_errors=True)
    print(verdict_line(verdict), flush=True)
    write_report(samples_path, Path(args.results))
    return 0 if verdict["ok"] and code == 0 else 1


# -- the report -----------------------------------------------------------------------


def verdict_line(v: dict) -> str:
    restarts = v.get("restarts") or []
    also = (f"; {len(restarts)} query restart(s) from the checkpoint after a Python process "
            f"of Spark's missed its 10 s to connect back ({', '.join(restarts)})"
            if restarts else "")
    if v.get("ok"):
        return (f"soak verdict: OK: {v['rows']:,} rows delivered, each id once, exactly ids "
                f"0..{v['committed_rows'] - 1} of committed steps [0, {v['steps'][1]}), every "
                f"step read; retention had expired steps [0, {v['steps'][0]}){also}")
    return "soak verdict: FAILED: " + "; ".join(v.get("problems", ["?"])) + also


# (key, label, unit, a trend to judge: counters that grow by design are not judged)
SERIES = [
    ("heap_used_mb", "JVM heap used", "MB", True),
    ("heap_committed_mb", "JVM heap committed", "MB", True),
    ("old_used_mb", "JVM old generation used", "MB", True),
    ("metaspace_mb", "JVM metaspace used", "MB", True),
    ("jvm_rss_mb", "JVM RSS", "MB", True),
    ("jvm_threads", "JVM threads", "", True),
    ("jvm_fds", "JVM open fds", "", True),
    ("driver_py_rss_mb", "Python driver RSS", "MB", True),
    ("driver_py_fds", "Python driver open fds", "", True),
    ("workers_py_rss_mb", "Spark's Python processes RSS (sum)", "MB", True),
    ("workers_py_n", "Spark's Python processes", "", True),
    ("workers_py_fds", "Spark's Python processes open fds (sum)", "", True),
    ("wal_mb", "WAL bytes", "MB", True),
    ("wal_alloc_mb", "WAL bytes allocated", "MB", True),
    ("wal_files", "WAL files", "", True),
    ("young_gcs", "young GCs", "", False),
    ("full_gcs", "full GCs", "", False),
    ("rows_written", "rows written", "", False),
    ("rows_read", "rows read", "", False),
]
COLUMNS = [  # the per-sample table: (header, format of one sample)
    ("min", lambda s: f"{s['t_s'] / 60:.1f}"),
    ("rows written / read", lambda s: f"{s['rows_written']:,} / {s['rows_read']:,}"),
    ("steps kept, reader at", lambda s: "—" if s["steps_next"] < 0 else
     f"[{s['steps_first']}, {s['steps_next']}), {s['reader_next']}"),
    ("heap used / committed MB", lambda s: f"{s['heap_used_mb']:.0f} / {s['heap_committed_mb']:.0f}"),
    ("old gen MB", lambda s: f"{s['old_used_mb']:.0f}"),
    ("metaspace MB", lambda s: f"{s['metaspace_mb']:.0f}"),
    ("GCs young / full", lambda s: f"{s['young_gcs']} / {s['full_gcs']}"),
    ("JVM RSS MB", lambda s: f"{s['jvm_rss_mb']:.0f}"),
    ("JVM threads / fds", lambda s: f"{s['jvm_threads']} / {s['jvm_fds']}"),
    ("Py driver RSS MB / fds", lambda s: f"{s['driver_py_rss_mb']:.0f} / {s['driver_py_fds']}"),
    ("Py workers RSS MB (n) / fds",
     lambda s: f"{s['workers_py_rss_mb']:.0f} ({s['workers_py_n']}) / {s['workers_py_fds']}"),
    ("WAL MB (alloc) / files",
     lambda s: f"{s['wal_mb']:.1f} ({s['wal_alloc_mb']:.1f}) / {s['wal_files']}"),
    ("load", lambda s: f"{s['load1']:.1f}"),
]
# The trend is fitted over the second half of the run: the first minutes hold the JVM's
# start, the first micro-batches (a minute or more on a loaded machine) and the heap
# growing to its working size, which a fit over them would take for a leak.
WARMUP_SHARE = 0.5


def slope_per_hour(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value), per hour."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if not var else sum((t - mx) * (v - my) for t, v in points) / var * 3600


def trend(samples: list[dict], key: str) -> tuple[float, str]:
    """The slope per hour over the second half of the run, and a word for it: flat
    (within 5% of the series' level, or 2 units, per hour), within noise (what the fit
    moves over the window is less than twice the samples' scatter around it: a sawtooth
    such as the heap between GCs), else growing or shrinking."""
    start = samples[-1]["t_s"] * WARMUP_SHARE
    pts = [(s["t_s"], float(s[key])) for s in samples if s["t_s"] >= start]
    slope = slope_per_hour(pts)
    level = max(abs(v) for _, v in pts) if pts else 0.0
    if abs(slope) <= max(0.05 * level, 2.0):
        return slope, "flat"
    mt = sum(t for t, _ in pts) / len(pts)
    mv = sum(v for _, v in pts) / len(pts)
    scatter = (sum((v - mv - slope / 3600 * (t - mt)) ** 2 for t, v in pts) / len(pts)) ** 0.5
    moved = abs(slope) / 3600 * (pts[-1][0] - pts[0][0])
    if moved < 2 * scatter:
        return slope, "within noise"
    return slope, "growing" if slope > 0 else "shrinking"


def num(v: float, unit: str) -> str:
    if unit == "MB":
        return f"{v:,.1f}"
    return f"{v:,.0f}"


def load_jsonl(path: Path) -> tuple[dict, list[dict], dict, dict]:
    meta: dict = {}
    samples: list[dict] = []
    verdict: dict = {}
    live: dict = {}
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        kind = rec.get("kind")
        if kind == "meta":
            meta = rec
        elif kind == "sample":
            samples.append(rec)
        elif kind == "verdict":
            verdict = rec
        elif kind == "live_heap":
            live = rec
    return meta, samples, verdict, live


def kept_notes(md: Path) -> str:
    """The hand-written ``## Notes`` section of an earlier report, kept as it is."""
    if not md.exists():
        return ""
    text = md.read_text()
    at = text.find("\n## Notes")
    return text[at:] if at >= 0 else ""


def write_report(samples_path: Path, md: Path) -> None:
    """``RESULTS-soak.md`` (and a chart beside it) from a samples file."""
    meta, samples, verdict, live = load_jsonl(samples_path)
    if not samples:
        print(f"soak: no samples in {samples_path}; no report", flush=True)
        return
    a = meta["args"]
    minutes = samples[-1]["t_s"] / 60
    rel = os.path.relpath(samples_path, REPO)
    lines = [
        "# Soak: a streaming writer with retention and a holding reader",
        "",
        f"`{meta['command']}` — {minutes:.1f} min sampled every {a['sample_s']:g} s, started "
        f"{meta['started']}; file backend, local[2], {meta['cores']} cores, driver "
        f"`spark.driver.memory={a['xmx']}` ({meta['xmx_arg']}, max heap "
        f"{meta['max_heap_mb']} MB, {meta['gc']}), {meta['java']}, Python {meta['python']}, "
        f"pyspark {meta['pyspark']}, product at {meta['commit']}. Writer: `rate` "
        f"{a['rows_per_second']:,} rows/s (2 partitions) → durablewal, trigger "
        f"{a['writer_trigger_s']:g} s, `retentionSteps={a['retention_steps']}`, "
        f"`cleanIntervalMs={a['clean_interval_ms']}`, `cleanGraceMs={a['clean_grace_ms']}`, "
        f"segments of {a['segment_bytes'] // 1024:,} KiB; reader: durablewal "
        f"(`readerId`, `holdRetention`) → parquet, trigger {a['reader_trigger_s']:g} s. "
        f"Load averages (1 / 5 / 15 min) at start "
        f"{' / '.join(f'{x:.2f}' for x in meta['load_start'])}, at end "
        f"{' / '.join(f'{x:.2f}' for x in verdict.get('load_end', [0, 0, 0]))}. Samples: "
        f"`{rel}` (git-ignored).",
        "",
        f"**{verdict_line(verdict).removeprefix('soak verdict: ')}**"
        + (f" (writer {verdict['writer_batches']} micro-batches with rows, reader "
           f"{verdict['reader_batches']})" if verdict.get("writer_batches") else ""),
        "",
        "## Samples",
        "",
        "| " + " | ".join(h for h, _ in COLUMNS) + " |",
        "|" + "|".join("---:" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(f(s) for _, f in COLUMNS) + " |" for s in samples]
    lines += [
        "",
        "## Each series",
        "",
        f"Trend: least-squares slope per hour over the samples after the first "
        f"{WARMUP_SHARE:.0%} of the run (JVM start, first micro-batches, the heap growing to "
        "its working size), extrapolated to an hour; flat when within 5% of the series' "
        "level (or 2 units) per hour, within noise when what the fit moves over that half "
        "is less than twice the samples' scatter around it (a sawtooth, as the heap "
        "between GCs).",
        "",
        "| series | first | last | max | last - first | trend per hour | reading |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for key, label, unit, judged in SERIES:
        vals = [float(s[key]) for s in samples]
        slope, word = trend(samples, key)
        name = f"{label} ({unit})" if unit else label
        lines.append(f"| {name} | {num(vals[0], unit)} | {num(vals[-1], unit)} | "
                     f"{num(max(vals), unit)} | {num(vals[-1] - vals[0], unit)} | "
                     f"{'+' if slope >= 0 else ''}{num(slope, unit)} | "
                     f"{word if judged else 'counter'} |")
    if live.get("heap_after_full_gc_mb") is not None:
        lines += ["", f"Heap used right after a full GC at the end (`jcmd GC.run`, the live "
                      f"set): {live['heap_after_full_gc_mb']:.1f} MB."]
    nmt_first, nmt_last = samples[0].get("nmt_mb") or {}, samples[-1].get("nmt_mb") or {}
    if nmt_last:
        lines += ["", "Driver JVM native memory by category (Native Memory Tracking, "
                      "committed MB; `jcmd PID VM.native_memory summary` each sample):", "",
                  "| category | first | last | max | last - first | trend per hour |",
                  "|---|---:|---:|---:|---:|---:|"]
        for cat in sorted(nmt_last, key=lambda c: -nmt_last[c]):
            seen = [smp["nmt_mb"][cat] for smp in samples if cat in (smp.get("nmt_mb") or {})]
            if max(seen) < 0.5:
                continue
            first = nmt_first.get(cat, 0.0)
            flat = [{"t_s": smp["t_s"], "v": (smp.get("nmt_mb") or {}).get(cat, 0.0)}
                    for smp in samples]
            lines.append(f"| {cat} | {first:,.1f} | {nmt_last[cat]:,.1f} | {max(seen):,.1f} | "
                         f"{nmt_last[cat] - first:+,.1f} | {trend(flat, 'v')[0]:+,.1f} |")
    role_names = sorted(set(samples[0].get("workers_by_role", {}))
                        | set(samples[-1].get("workers_by_role", {})))
    if role_names:
        lines += ["", "Spark's Python processes by role, first and last sample (count, RSS "
                      "MB summed, fds):", "",
                  "| role | first | last |", "|---|---:|---:|"]
        for role in role_names:
            cells = []
            for smp in (samples[0], samples[-1]):
                n, rss, fds = smp.get("workers_by_role", {}).get(role, [0, 0.0, 0])
                cells.append(f"{n}, {rss:.0f} MB, {fds}" if n else "—")
            lines.append(f"| `{role}` | {cells[0]} | {cells[1]} |")
    growing = [label for key, label, _u, judged in SERIES if judged
               and trend(samples, key)[1] not in ("flat", "within noise")]
    lines += ["", "Computed reading: " + (
        "every judged series is flat." if not growing else
        f"not flat: {', '.join(growing)}; every other judged series is flat or within "
        "noise.")]
    chart = md.with_name(md.stem.lower() + ".png")
    if plot(samples, chart):
        lines += ["", f"![soak series]({chart.name})"]
    md.write_text("\n".join(lines) + "\n" + kept_notes(md))
    print(f"soak: wrote {md}", flush=True)


def plot(samples: list[dict], path: Path) -> bool:
    """A chart of the memory, fd and WAL series, if matplotlib is installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s["t_s"] / 60 for s in samples]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex=True)
    panels = [
        ("JVM heap (MB)", ["heap_used_mb", "heap_committed_mb", "old_used_mb", "metaspace_mb"]),
        ("RSS (MB)", ["jvm_rss_mb", "driver_py_rss_mb", "workers_py_rss_mb"]),
        ("open fds, threads", ["jvm_fds", "driver_py_fds", "workers_py_fds", "jvm_threads"]),
        ("WAL (MB; files on the right)", ["wal_mb", "wal_alloc_mb", "wal_files"]),
    ]
    for ax, (title, keys) in zip(axes.flat, panels, strict=True):
        for key in keys:
            if key == "wal_files":  # a count beside megabytes: its own axis
                twin = ax.twinx()
                twin.plot(t, [s[key] for s in samples], label=key, marker=".", color="C2")
                twin.set_ylim(bottom=0)
                twin.set_ylabel(key)
                continue
            ax.plot(t, [s[key] for s in samples], label=key, marker=".")
        ax.set_title(title)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel("minutes")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


# -- command line ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--sample-s", type=float, default=60.0)
    p.add_argument("--xmx", default="1g", help="spark.driver.memory: the driver JVM's -Xmx")
    p.add_argument("--rows-per-second", type=int, default=1000)
    p.add_argument("--writer-trigger-s", type=float, default=1.0)
    p.add_argument("--reader-trigger-s", type=float, default=2.0)
    p.add_argument("--retention-steps", type=int, default=30)
    p.add_argument("--clean-interval-ms", type=int, default=10_000)
    # above the longest micro-batch (an older attempt is refused), far below the run
    p.add_argument("--clean-grace-ms", type=int, default=120_000)
    p.add_argument("--segment-bytes", type=int, default=1024 * 1024)
    p.add_argument("--no-nmt", dest="nmt", action="store_false",
                   help="run the driver JVM without Native Memory Tracking (summary)")
    p.add_argument("--results", default=str(HERE / "RESULTS-soak.md"))
    p.add_argument("--keep", action="store_true", help="keep the WAL, checkpoints and output")
    p.add_argument("--report-from", help="only write the report from this samples file")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)
    return p


def main() -> int:
    args = build_parser().parse_args()
    if args.child:
        return child(args)
    if args.report_from:
        write_report(Path(args.report_from), Path(args.results))
        return 0
    return soak(args)


if __name__ == "__main__":
    sys.exit(main())
