"""The main job: an orders pipeline on the embedded file log, crashed on purpose.

1. Generates order files (one file = one micro-batch) for several regions and tables.
2. A writing query (JSON files -> ``format("durablewal")``) runs in a child process,
   which is killed with SIGKILL part-way, then restarted from its checkpoint.
3. A streaming query reads the WAL back (``readStream.format("durablewal")``).
4. Prints a report: rows in, rows out, duplicates, lost, steps, time.

Run it with ``durablewal demo`` or ``python -m pyspark_durable demo``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

TABLES = {0: "orders_eu", 1: "orders_us", 2: "orders_apac"}
PRODUCTS = ["kettle", "lamp", "chair", "desk", "mug", "plant"]


def generate(in_dir: Path, files: int, rows: int, seed: int = 7) -> int:
    """Write ``files`` JSON files of ``rows`` orders each; return the number of rows."""
    rng = random.Random(seed)
    in_dir.mkdir(parents=True, exist_ok=True)
    order_id = 0
    for f in range(files):
        lines = []
        for _ in range(rows):
            region = rng.randrange(3)
            lines.append(json.dumps({
                "order_id": order_id, "region": region, "table": TABLES[region],
                "customer": f"c{rng.randrange(1000):04d}", "product": rng.choice(PRODUCTS),
                "amount": round(rng.uniform(1, 500), 2),
            }))
            order_id += 1
        tmp = in_dir / f".{f:05d}.tmp"
        tmp.write_text("\n".join(lines))
        tmp.rename(in_dir / f"{f:05d}.json")  # whole files only, as Spark's file source wants
    return order_id


def run_writer(wal: Path, in_dir: Path, ckpt: Path) -> None:
    """Child: the writing query; prints one line per committed micro-batch."""
    from pyspark.sql.streaming import StreamingQueryListener

    from pyspark_durable.session import local_session

    spark = local_session("durablewal-demo-writer")

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event) -> None: ...
        def onQueryIdle(self, event) -> None: ...
        def onQueryTerminated(self, event) -> None: ...

        def onQueryProgress(self, event) -> None:
            p = event.progress
            print(f"BATCH {p.batchId} {p.numInputRows}", flush=True)

    spark.streams.addListener(Progress())
    schema = ("order_id long, region long, table string, customer string, product string, "
              "amount double")
    orders = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(in_dir))
    query = (orders.writeStream.format("durablewal")
             .option("namespace", "shop").option("regionColumn", "region")
             .option("tableColumn", "table").option("checkpointLocation", str(ckpt))
             .trigger(availableNow=True).start(str(wal)))
    query.awaitTermination()
    print("DONE", flush=True)


def _line(text: str) -> None:
    print(f"  {text}", flush=True)


def writer_process(wal: Path, in_dir: Path, ckpt: Path, kill_after: int | None) -> tuple[int, bool]:
    """Run the writer child; SIGKILL its process group after ``kill_after`` batches."""
    cmd = [sys.executable, "-m", "pyspark_durable.demo", "--child-writer", str(wal), str(in_dir),
           str(ckpt)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    batches = 0
    killed = False
    for line in proc.stdout:
        parts = line.split()
        if parts and parts[0] == "BATCH" and int(parts[2]) > 0:
            batches += 1
            _line(f"micro-batch {parts[1]:>3} -> one WAL step, {parts[2]} rows")
            if kill_after is not None and batches >= kill_after:
                time.sleep(random.uniform(0.1, 0.5))  # somewhere inside the next batch
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
                break
    _, err = proc.communicate()
    if not killed and proc.returncode != 0:
        raise SystemExit(f"the writing query failed:\n{err[-2000:]}")
    return batches, killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="durablewal demo", description=__doc__.splitlines()[0])
    parser.add_argument("--path", help="WAL root folder (default: a fresh temp folder)")
    parser.add_argument("--files", type=int, default=8, help="input files = micro-batches")
    parser.add_argument("--rows", type=int, default=500, help="orders per file")
    parser.add_argument("--kill-after", type=int, default=3, help="kill the writer after N batches")
    parser.add_argument("--child-writer", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_writer:
        run_writer(*(Path(p) for p in args.child_writer))
        return 0

    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="durablewal-demo-"))
    wal = Path(args.path) if args.path else work / "wal"
    if args.path and (wal / "shop").exists():
        raise SystemExit(f"{wal}/shop already exists; give a fresh --path")
    print(f"durablewal demo: orders -> WAL at {wal} (file backend, namespace 'shop')")
    rows_in = generate(work / "in", args.files, args.rows)
    print(f"[1/4] generated {rows_in} orders in {args.files} files "
          f"(3 regions, tables {', '.join(TABLES.values())})")
    print(f"[2/4] writing query started; it will be killed with SIGKILL after "
          f"{args.kill_after} micro-batches")
    done, killed = writer_process(wal, work / "in", work / "ckpt", args.kill_after)
    print(f"      killed the writer (kill -9 of driver, JVM and workers) after {done} batches"
          if killed else "      the writer finished before the kill")
    print("[3/4] restarting the writing query from its checkpoint")
    writer_process(wal, work / "in", work / "ckpt", None)

    print("[4/4] reading the WAL back with a streaming query")
    from pyspark_durable.session import local_session

    spark = local_session("durablewal-demo-reader")
    out = work / "out"
    query = (spark.readStream.format("durablewal").option("namespace", "shop").load(str(wal))
             .writeStream.format("parquet").option("checkpointLocation", str(work / "ckpt-r"))
             .trigger(availableNow=True).start(str(out)))
    query.awaitTermination()
    got = spark.read.parquet(str(out)).select("order_id", "_region", "_table", "_step").collect()
    counts = Counter(r.order_id for r in got)
    duplicates = sum(c - 1 for c in counts.values() if c > 1)
    lost = sum(1 for i in range(rows_in) if i not in counts)
    steps = len({r._step for r in got})
    per_region = Counter(r._region for r in got)
    spark.stop()
    elapsed = time.monotonic() - started
    print()
    print("exactly-once report")
    print(f"  rows in      {rows_in}")
    print(f"  rows out     {len(got)}")
    print(f"  duplicates   {duplicates}")
    print(f"  lost         {lost}")
    print(f"  steps        {steps}  (one per micro-batch, across 3 regions)")
    print("  per region   " + ", ".join(f"{r}: {n}" for r, n in sorted(per_region.items())))
    print(f"  crash        {'writer killed with SIGKILL mid-stream' if killed else 'none'}")
    print(f"  time         {elapsed:.1f} s")
    ok = duplicates == 0 and lost == 0 and len(got) == rows_in
    print("  verdict      " + ("EXACTLY ONCE" if ok else "FAILED"))
    if not args.path:
        cli = f"{sys.executable} -m pyspark_durable"  # works without an activated venv
        print(f"  (WAL kept at {wal}; explore it with: {cli} steps {wal} --namespace shop)")
    else:
        shutil.rmtree(work / "in", ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
