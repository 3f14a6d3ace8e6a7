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
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from soak_child import child
from soak_probes import find_jvm, jvm_facts, live_heap_mb, read_status, sample
from soak_report import verdict_line, write_report

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "out"


# -- the run (this process) ------------------------------------------------------------


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
