"""Sections 3 and 4 of bench/s3_log.py: what a commit costs (milliseconds and S3
requests), and the requests and bytes of a Spark-like micro-batch, a cleaner pass and a
fresh open of a namespace with a long history.

A module of its own because these sections count requests rather than time bulk data;
run ``python bench/s3_log.py --sections 3,4``, not this.
"""

from __future__ import annotations

import argparse
import collections
import time
import uuid
from collections.abc import Callable
from typing import Any

from s3_tools import (
    BATCH_ROWS,
    METER,
    OPS,
    SMALL_ROWS,
    TALLY_HEAD,
    Env,
    Tally,
    alternate,
    med,
    pct,
    tally_row,
    typed_rows,
)

from pyspark_durable.wal import Cleaner, Namespace

# -- 3: commit latency ---------------------------------------------------------------


def commit_latency(env: Env, commits: int, backend: str) -> dict[str, Any]:
    """``commits`` 5-row steps by one writer after a first step defined the table."""
    name = f"lat{uuid.uuid4().hex[:8]}"
    ns = env.s3_namespace(name) if backend == "s3" else env.file_namespace(name)
    small = typed_rows(0, SMALL_ROWS)
    try:
        a = ns.begin("lat", 0)
        a.write("t", small)
        a.commit()
        ms: list[float] = []
        write_ms: list[float] = []
        calls: list[Tally] = []
        for step in range(1, commits + 1):
            t0 = time.perf_counter()
            a = ns.begin("lat", step)
            a.write("t", small)
            a.receipt()
            METER.take()
            t1 = time.perf_counter()
            a.commit()
            ms.append(1000 * (time.perf_counter() - t1))
            write_ms.append(1000 * (t1 - t0))
            calls.append(METER.take())
    finally:
        ns.close()
    ops: collections.Counter = collections.Counter()
    for c in calls:
        ops.update(c.calls)
    totals = [c.total for c in calls]
    return {"ns": name, "p50": pct(ms, 0.5), "p99": pct(ms, 0.99), "write_p50": pct(write_ms, 0.5),
            "req_p50": pct(totals, 0.5), "req_p99": pct(totals, 0.99),
            "ops": {op: n / commits for op, n in ops.items()}}


def latency_section(env: Env, args: argparse.Namespace, log: Callable[[str], None]
                    ) -> tuple[list[str], str]:
    log(f"3. commit latency: {args.commits} commits of {SMALL_ROWS}-row steps")
    runs = alternate({"s3": lambda _: commit_latency(env, args.commits, "s3"),
                      "file": lambda _: commit_latency(env, args.commits, "file")},
                     args.reps, lambda m: log(m[:200]))
    s3, fl = runs["s3"], runs["file"]
    ops = {op: med([r["ops"].get(op, 0.0) for r in s3]) for op in OPS}
    rows = [
        "### 3. Commit latency: one writer, small steps",
        "",
        f"{args.commits} steps of {SMALL_ROWS} rows (one writer, consecutive writer steps, "
        "region 0), each `begin` + `write` + `receipt`, then `commit()` timed alone; "
        f"median over {args.reps} rounds of each round's percentile. Requests: API calls "
        "counted by a `before-call.s3` hook on the store's client during `commit()`.",
        "",
        "| backend | commit p50 ms | commit p99 ms | requests per commit p50 | p99 | "
        "task side (`write` + `receipt`) p50 ms |",
        "|---|---:|---:|---:|---:|---:|",
        f"| s3 (SeaweedFS, 127.0.0.1) | {med([r['p50'] for r in s3]):.1f} | "
        f"{med([r['p99'] for r in s3]):.1f} | {med([r['req_p50'] for r in s3]):.0f} | "
        f"{med([r['req_p99'] for r in s3]):.0f} | {med([r['write_p50'] for r in s3]):.1f} |",
        f"| file | {med([r['p50'] for r in fl]):.1f} | {med([r['p99'] for r in fl]):.1f} | "
        f"| | {med([r['write_p50'] for r in fl]):.1f} |",
        "",
        "Requests per `commit()` on S3, by operation (mean over the commits of a round, "
        "median of rounds): " + ", ".join(f"{op} {n:.2f}" for op, n in ops.items() if n) + ".",
    ]
    return rows, s3[-1]["ns"]


# -- 4: requests and bytes ----------------------------------------------------------


def micro_batches(env: Env, batches: int, log: Callable[[str], None]) -> list[str]:
    """What a streaming query's task and driver send per micro-batch, steady state."""
    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for
    from pyspark_durable.spark.sink import (
        WalCommitMessage,
        commit_receipts,
        keep_retention,
        write_batches,
    )

    name = f"mb{uuid.uuid4().hex[:8]}"
    s3 = env.s3_options()
    opts = WalOptions.parse({"backend": "s3", "namespace": name, "path": s3.pop("path"),
                             **{f"s3.{k}": v for k, v in s3.items()}})
    ns = namespace_for(opts)
    METER.attach(ns.store.client)
    rows = typed_rows(0, BATCH_ROWS)
    schema = rows.schema
    task: list[tuple[Tally, float]] = []
    driver: list[tuple[Tally, float]] = []
    retention: list[tuple[Tally, float]] = []
    METER.take()
    for batch_id in range(batches):
        t0 = time.perf_counter()
        receipt = write_batches(opts, iter(rows.to_batches(max_chunksize=BATCH_ROWS)),
                                "query-bench", batch_id, uuid.uuid4().hex, schema)
        task.append((METER.take(), time.perf_counter() - t0))
        t0 = time.perf_counter()
        commit_receipts(opts, [WalCommitMessage(receipt)], None, batch_id, consecutive=True)
        driver.append((METER.take(), time.perf_counter() - t0))
        t0 = time.perf_counter()
        keep_retention(opts)
        retention.append((METER.take(), time.perf_counter() - t0))
    METER.take()
    t0 = time.perf_counter()
    got = sum(b.num_rows for sb in ns.read_step(len(ns.steps()) - 1) for b in sb.batches)
    read = (METER.take(), time.perf_counter() - t0)
    assert got == BATCH_ROWS, got
    ns.close()
    from pyspark_durable.spark import session_cache

    session_cache._CACHE.clear()  # the handle is closed

    def typical(samples: list[tuple[Tally, float]]) -> tuple[Tally, float]:
        steady = samples[2:]  # the first batches define the table, open the region log
        ordered = sorted(steady, key=lambda s: s[0].total)
        tally = ordered[len(ordered) // 2][0]
        return tally, med([s for _, s in steady])

    first = [tally_row("first micro-batch: task (defines the table, creates the region log)",
                       *task[0]),
             tally_row("first micro-batch: driver's commit", *driver[0])]
    log(f"  micro-batch: task {typical(task)[0]} driver {typical(driver)[0]}")
    return [tally_row(f"micro-batch, task side: `write_batches` of {BATCH_ROWS:,} rows "
                      "(one region object)", *typical(task)),
            tally_row("micro-batch, driver side: `commit_receipts`", *typical(driver)),
            tally_row("micro-batch, driver side: `keep_retention` after it (no pass due)",
                      *typical(retention)),
            tally_row("read of the last micro-batch's step (`ns.read_step`, the same "
                      "handle)", *read),
            *first]


def build_history(env: Env, name: str, steps: int, ns: Namespace | None,
                  log: Callable[[str], None]) -> Namespace:
    """``steps`` steps in all of one writer, as real commits leave them in the commits
    log: one ``step`` record per append (one object each), with the snapshots a
    committer writes every 1,000 records. Real commits of a long history take ~0.2 s
    each here (section 3's last rows say why), so the region entries are appended 100 at
    a time (one object; an open never reads region logs) and the records without a
    replay after each: the handle replays every 100 and calls ``snapshot_if_due``, the
    hook every commit calls."""
    from pyspark_durable.codec import EntryKey, codec_for
    from pyspark_durable.log import Record
    from pyspark_durable.wal.format.records import Run, StepCommit, encode_meta
    from pyspark_durable.wal.ledger import COMMITS_LOG

    small = typed_rows(0, SMALL_ROWS)
    if ns is None:
        ns = env.s3_namespace(name)
        a = ns.begin("hist", 0)
        a.write("t", small)
        a.commit()
    info = ns.tables.lookup("t")
    value = codec_for(info.payload_format, info.schema).encode_value(small)
    key = EntryKey(ns.namespace_id, 0, info.table_id, 0).encode()
    region = ns.store.open_region(0)
    commits = ns.store.open_log(COMMITS_LOG)
    start = time.perf_counter()
    have = len(ns.steps())
    for lo in range(have, steps, 100):
        hi = min(steps, lo + 100)
        atts = [f"h{i:010d}" for i in range(lo, hi)]
        offsets = region.append([Record(key, value, (("a", att.encode()), ("w", b"hist"),
                                                     ("s", str(i).encode())))
                                 for i, att in zip(range(lo, hi), atts, strict=True)])
        for i, att, off in zip(range(lo, hi), atts, offsets, strict=True):
            doc = StepCommit("hist", i, (att,), (Run(0, info.table_id, off, off + 1,
                                                     small.num_rows, len(value), 0),),
                             int(time.time() * 1000)).to_json()
            if ns.info.incarnation is not None:
                doc["i"] = ns.info.incarnation
            commits.append([Record(b"", encode_meta(doc))])
        ns.refresh()
        ns.ledger.snapshot_if_due()
    assert len(ns.steps()) == steps, (len(ns.steps()), steps)
    METER.take()
    log(f"  history {name}: {have} -> {steps} steps in {time.perf_counter() - start:.0f} s")
    return ns


def commits_at(ns: Namespace, n: int) -> tuple[Tally, float, float]:
    """``n`` real commits of small steps on ``ns``: the median commit's requests, the p50
    commit in seconds, and its bytes received (per commit, median)."""
    small = typed_rows(0, SMALL_ROWS)
    step = len(ns.steps())
    samples: list[tuple[Tally, float]] = []
    for i in range(n):
        a = ns.begin("hist", step + i)
        a.write("t", small)
        a.receipt()
        METER.take()
        t0 = time.perf_counter()
        a.commit()
        samples.append((METER.take(), time.perf_counter() - t0))
    ordered = sorted(samples, key=lambda x: x[0].received)
    return ordered[n // 2][0], med([s for _, s in samples]), 0.0


def fresh_open(env: Env, name: str) -> tuple[Tally, float]:
    METER.take()
    t0 = time.perf_counter()
    ns = env.s3_namespace(name, create=False)
    secs = time.perf_counter() - t0
    ns.close()
    return METER.take(), secs


def requests_section(env: Env, args: argparse.Namespace, lat_ns: str | None,
                     log: Callable[[str], None]) -> list[str]:
    log("4. requests and bytes")
    rows = ["### 4. Requests and bytes",
            "",
            "S3 API calls by operation (a botocore `before-call.s3` hook on the store's "
            "client), HTTP body bytes sent (`before-send`) and received (`Content-Length` of "
            "the answers). Micro-batch: a task's `spark.sink.write_batches` of "
            f"{BATCH_ROWS:,} rows and the driver's `commit_receipts` and `keep_retention`, "
            "one process (the session's cached handle), the median of micro-batches 2-"
            f"{args.batches - 1} by request count; the first one apart.",
            "", *TALLY_HEAD]
    rows += micro_batches(env, args.batches, log)

    # a cleaner pass: the commit-latency namespace (201 steps), half of it expired
    name = lat_ns or f"clean{uuid.uuid4().hex[:8]}"
    ns = env.s3_namespace(name)
    if lat_ns is None:
        for step in range(201):
            a = ns.begin("clean", step)
            a.write("t", typed_rows(0, SMALL_ROWS))
            a.commit()
    steps = len(ns.steps())
    METER.take()
    t0 = time.perf_counter()
    ns.expire(steps // 2)
    expire = (METER.take(), time.perf_counter() - t0)
    t0 = time.perf_counter()
    report = Cleaner(ns, grace_ms=0).run_once()
    clean = (METER.take(), time.perf_counter() - t0)
    ns.close()
    log(f"  clean: freed {report.freed_entries} entries; {clean[0]}")
    rows += [tally_row(f"`ns.expire({steps // 2})` of {steps} steps", *expire),
             tally_row(f"cleaner pass after it (`Cleaner(ns, grace_ms=0).run_once()`, "
                       f"{report.freed_entries} entries freed)", *clean)]

    # fresh opens as history grows (snapshots every 1,000 commit records)
    name = f"hist{uuid.uuid4().hex[:8]}"
    ns = None
    for size in sorted({int(s) for s in args.opens.split(",")}):
        ns = build_history(env, name, size, ns, log)
        opens = [fresh_open(env, name) for _ in range(3)]
        tally = sorted(opens, key=lambda o: o[0].total)[1][0]
        rows.append(tally_row(f"fresh open (`Namespace(store, create=False)`) at {size:,} "
                              "steps, median of 3", tally, med([s for _, s in opens])))
        log(f"  open at {size}: {tally}")
        commit, secs, _ = commits_at(ns, 20)
        rows.append(tally_row(f"a commit at {size:,} steps (one writer, 5 rows; median of 20 "
                              "by bytes received; ms: p50)", commit, secs))
        log(f"  commit at {size}: {commit} {1000 * secs:.0f} ms")
    if ns is not None:
        from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME

        snaps = ns.store.snapshot_versions(SNAPSHOT_NAME)
        ns.close()
        rows += ["", f"The history namespace (one writer, {SMALL_ROWS}-row steps, built as "
                 "`build_history` says: one commits object per step) holds snapshot "
                 f"versions {snaps} (commits-log offsets) after its "
                 "last commit; an open reads the newest and replays the records after it, "
                 "one GetObject per record (each commit is an object of its own)."]
    return rows
