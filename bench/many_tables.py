"""A first step that defines many tables, and the size of a step that writes them.

Measures, on the file backend (real fsync), in a fresh process per repetition (median
of ``--reps``):

- ``api``: ``write_step`` of N new tables of 10 rows each into an empty namespace, from
  the call to its return (the namespace is opened before the clock starts);
- ``sink``: what a Spark task and its driver run for one micro-batch of N tables routed
  by ``tableColumn`` (``spark.sink.write_batches`` + ``commit_receipts``), without Spark;
- per path, the commits records the step appended (definitions and the step) and the
  bytes of its ``step`` record as stored;
- ``next step``: the bytes of the second step's record (the same N tables again), what
  every later micro-batch of such a query commits.

    python bench/many_tables.py --tables 1000 --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow as pa

NAMESPACE = "many"
ROWS = 10


def rows(n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "payload": pa.array([b"x" * 92] * n, pa.binary())})


def commits_tail(ns, since: int) -> list[bytes]:
    """The values of the commits records appended at or after offset ``since``."""
    from pyspark_durable.wal.ledger import COMMITS_LOG

    return [e.value for e in ns.store.open_log(COMMITS_LOG).read(since)]


def measure(root: str, path: str, tables: int) -> dict:
    """One fresh process's numbers (printed as JSON by ``--measure``)."""
    from pyspark_durable.endpoint import open_namespace, write_step

    wal = os.path.join(root, "wal")
    if path == "api":
        ns = open_namespace({"backend": "file", "namespace": NAMESPACE,
                             "options": {"path": wal}})
        data = {f"t{i}": rows(ROWS) for i in range(tables)}
        since = ns.ledger.state.next_offset
        t0 = time.perf_counter()
        write_step(ns, "loader", 0, data)
        seconds = time.perf_counter() - t0
        first = commits_tail(ns, since)
        since = ns.ledger.refreshed().next_offset
        write_step(ns, "loader", 1, data)
    else:
        from pyspark_durable.spark.options import WalOptions
        from pyspark_durable.spark.session_cache import namespace_for
        from pyspark_durable.spark.sink import WalCommitMessage, commit_receipts, write_batches

        opts = WalOptions.parse({"path": wal, "namespace": NAMESPACE, "tableColumn": "table"})
        ns = namespace_for(opts)
        n = tables * ROWS
        batch = pa.record_batch({"table": pa.array([f"t{i // ROWS}" for i in range(n)]),
                                 "id": pa.array(range(n), pa.int64()),
                                 "payload": pa.array([b"x" * 92] * n, pa.binary())})
        since = ns.ledger.state.next_offset

        def micro_batch(batch_id: int) -> None:
            receipt = write_batches(opts, iter([batch]), "query", batch_id, f"a{batch_id}",
                                    batch.schema)
            commit_receipts(opts, [WalCommitMessage(receipt)], "query", batch_id,
                            consecutive=True)
        t0 = time.perf_counter()
        micro_batch(0)
        seconds = time.perf_counter() - t0
        first = commits_tail(ns, since)
        since = ns.ledger.refreshed().next_offset
        micro_batch(1)
    later = commits_tail(ns, since)
    return {"seconds": seconds, "records": len(first), "step_bytes": len(first[-1]),
            "next_step_bytes": len(later[-1]), "next_records": len(later)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=1000)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--paths", default="api,sink")
    p.add_argument("--measure", nargs=2, metavar=("ROOT", "PATH"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.tables)))
        return
    for path in args.paths.split(","):
        samples: list[dict] = []
        for _ in range(args.reps):
            with tempfile.TemporaryDirectory(prefix="many-tables-",
                                             dir=os.environ.get("TMPDIR")) as root:
                out = subprocess.run([sys.executable, __file__, "--measure", root, path,
                                      "--tables", str(args.tables)],
                                     check=True, capture_output=True, text=True).stdout
                samples.append(json.loads(out.strip().splitlines()[-1]))
        secs = [s["seconds"] for s in samples]
        last = samples[-1]
        print(f"{path}: first step defining {args.tables} tables: median "
              f"{statistics.median(secs):.3f} s (runs {', '.join(f'{s:.3f}' for s in secs)}); "
              f"{last['records']} commits records; step record {last['step_bytes']:,} B; "
              f"next step {last['next_records']} record(s), {last['next_step_bytes']:,} B")


if __name__ == "__main__":
    main()
