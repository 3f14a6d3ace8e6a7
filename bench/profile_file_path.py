"""Where the file path's time goes, stage by stage, without Spark.

A Python worker's write task runs ``spark.sink.write_batches`` over the Arrow batches
Spark hands it; a read task runs ``spark.source.ReadPlan.read``. This runs both in one
process, on the rows ``bench/run.py`` uses (~100 B, 10,000-row batches as
``spark.sql.execution.arrow.maxRecordsPerBatch``), one task, a fresh namespace on the
file log, and times each stage alone (median of ``--reps``), beside what the device
itself allows (the same bytes with ``os.write`` and one ``fdatasync``):

    python bench/profile_file_path.py --rows 1000000 --reps 3

Spark's share (JVM <-> Arrow <-> Python) is not here: ``bench/run.py``'s Python floor
measures it. A stage is timed alone, so the stages can sum to more than the whole
(the whole overlaps encoding with the log's writer thread).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable

import pyarrow as pa
from common import make_rows


def timed(fn: Callable[[], object], reps: int) -> float:
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=10_000)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()

    from pyspark_durable.codec import codec_for
    from pyspark_durable.log import Record, open_store
    from pyspark_durable.spark.arrow_types import read_schema
    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for
    from pyspark_durable.spark.sink import WalCommitMessage, commit_receipts, write_batches
    from pyspark_durable.spark.source import ReadPlan, WalPartition
    from pyspark_durable.wal.format.runs import entry_digest
    from pyspark_durable.wal.metadata import METADATA_FIELDS

    table = make_rows(0, args.rows)
    batches = table.to_batches(max_chunksize=args.batch)
    schema = table.schema
    nbytes = table.nbytes
    rows: list[tuple[str, float]] = []

    def row(name: str, secs: float) -> None:
        rows.append((name, secs))

    with tempfile.TemporaryDirectory(prefix="profile-", dir=os.environ.get("TMPDIR")) as root:
        codec = codec_for("arrow", schema)
        entry_rows = max(1, int(args.batch * (900 * 1024) / max(batches[0].nbytes, 1)))
        parts = [b.slice(s, entry_rows) for b in batches for s in range(0, b.num_rows, entry_rows)]
        row("floor: iterate the batches", timed(lambda: [b.num_rows for b in batches], args.reps))
        row("sink: cast to the stored schema (unchanged: a check)",
            timed(lambda: [b.schema.equals(schema, check_metadata=True) for b in batches],
                  args.reps))
        values: list = []
        row(f"sink: encode {len(parts)} entries (Arrow IPC)",
            timed(lambda: values.__setitem__(slice(None), [codec.encode_value(x) for x in parts]),
                  args.reps))
        store = open_store("file", "raw", path=os.path.join(root, "raw"))
        region = store.open_region(0)

        def append() -> None:
            futures = [region.append_async([Record(b"k" * 26, v, (("a", b"x"),))])
                       for v in values]
            for f in futures:
                f.result()
        row("sink: file log append + fsync of those entries", timed(append, args.reps))
        store.close()
        raw = os.path.join(root, "raw.bin")

        def device() -> None:
            fd = os.open(raw, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            try:
                for v in values:
                    os.write(fd, v)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        row("device: os.write + one fdatasync of the same bytes", timed(device, args.reps))

        step = [0]

        def sink() -> None:
            opts = WalOptions.parse({"path": os.path.join(root, f"wal{step[0]}"),
                                     "namespace": "profile"})
            receipt = write_batches(opts, iter(batches), "query-profile", 0, "a0", schema)
            commit_receipts(opts, [WalCommitMessage(receipt)], "query-profile", 0,
                            consecutive=True)
            step[0] += 1
        row("sink: write_batches + driver commit (a task's whole write)", timed(sink, args.reps))

        opts = WalOptions.parse({"path": os.path.join(root, "wal0"), "namespace": "profile"})
        ns = namespace_for(opts, create=False)
        stored = ns.tables.lookup(next(iter(ns.tables.by_id()))).schema
        plan = ReadPlan(opts, None, None, pa.schema([*read_schema(stored), *METADATA_FIELDS]),
                        True)
        bare = ReadPlan(opts, None, None, read_schema(stored), False)
        partition = WalPartition(0, list(ns.steps()))
        log0 = ns.store.open_region(0)
        row("source: file log read (CRC-checked frames)",
            timed(lambda: sum(1 for _ in log0.read(log0.low_watermark())), args.reps))
        row("source: decode the entries (Arrow IPC)",
            timed(lambda: [codec.decode(e.value[1:]) for e in log0.read(log0.low_watermark())],
                  args.reps))
        row("source: ReadPlan.read without metadata columns",
            timed(lambda: sum(b.num_rows for b in bare.read(partition)), args.reps))
        row("source: ReadPlan.read with metadata columns (a task's whole read)",
            timed(lambda: sum(b.num_rows for b in plan.read(partition)), args.reps))
        entries = list(log0.read(log0.low_watermark()))  # in memory: the hash alone
        row(f"digests: XXH3-64 of {len(entries)} entries' key and value (verified replay; "
            "a write hashes each entry once, a read once)",
            timed(lambda: [entry_digest(e.key, e.value) for e in entries], args.reps))

    print(f"{args.rows:,} rows, {nbytes / 1e6:.0f} MB, {len(batches)} batches, "
          f"{len(parts)} entries; one task, median of {args.reps}\n")
    print("| stage | seconds | rows/s |\n|---|---:|---:|")
    for name, secs in rows:
        rate = f"{args.rows / secs / 1e3:,.0f}k" if secs > 0.001 else "-"
        print(f"| {name} | {secs:{'.4f' if secs < 0.01 else '.3f'}} | {rate} |")
    digest = next(secs for name, secs in rows if name.startswith("digests:"))
    read = next(secs for name, secs in rows if name.startswith("source: ReadPlan.read with metadata"))
    write = next(secs for name, secs in rows if name.startswith("sink: write_batches"))
    print(f"\ndigests: {digest / read:.1%} of a task's whole read (which includes them), "
          f"{digest / write:.1%} of its whole write; {digest / args.rows * 1e6:.4f} s per 1M rows")


if __name__ == "__main__":
    main()
