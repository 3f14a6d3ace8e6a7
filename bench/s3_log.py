"""The S3 log backend against the raw S3 clients, on a local SeaweedFS.

Starts its own SeaweedFS (``tests/s3_server.py``: one ``weed server -s3`` on
127.0.0.1, data under ``bench/out/``), and measures, median of ``--reps`` rounds after
one warm-up round (the order of the sides alternates every round):

1. **sink**: ``--steps`` steps of ``--rows`` rows in all (6 typed columns, ~64 B a
   row), each ``ns.begin`` + ``Attempt.write`` + ``commit`` into region 0, against the
   raw boto3 client PUTting the region objects the WAL wrote (the same count, sizes and
   bytes, listed and fetched after the first WAL round), one after another; also the
   same WAL write on the file backend.
2. **source**: ``ns.read_step`` of every step (Arrow batches decoded) against raw GETs
   of the same objects (one at a time, and 16 at a time as the log's read-ahead does);
   also the file backend's read.
3. **commit latency**: ``--commits`` steps of 5 rows by one writer: ``commit()`` in ms
   (p50, p99) and in requests (counted by a botocore ``before-call`` hook on the
   store's client); the file backend's beside it.
4. **requests and bytes** per Spark-like micro-batch (a task's ``write_batches`` of
   10,000 rows; the driver's ``commit_receipts`` + ``keep_retention``), per cleaner pass
   (``ns.expire`` + ``Cleaner(ns, grace_ms=0).run_once()``), and per fresh open of a
   namespace at ``--opens`` steps (1,000 to 5,000; real commits).
5. **boto3 vs obstore** on the sink path: the section-1 objects PUT with a conditional
   create by each client, one at a time and 4 at a time, and a small conditional
   create's latency (p50, p99).

    python bench/s3_log.py --reps 3                      # ~5 min -> bench/RESULTS-s3.md
    python bench/s3_log.py --reps 1 --rows 200000 --opens 1000,1100 --sections 1,2,3
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT), str(ROOT / "tests")]

from common import OUT  # noqa: E402
from s3_server import REGION, SeaweedS3  # noqa: E402

from pyspark_durable.log import open_store, region_log_name  # noqa: E402
from pyspark_durable.wal import Cleaner, Namespace  # noqa: E402

BUCKET = "bench"
WAL_PREFIX = "x"
OPS = ("PutObject", "GetObject", "ListObjectsV2", "HeadObject", "DeleteObjects",
       "DeleteObject", "HeadBucket")
SMALL_ROWS = 5  # a commit-latency step
BATCH_ROWS = 10_000  # a micro-batch (section 4)


# -- counting requests --------------------------------------------------------------


@dataclass
class Tally:
    """S3 API calls by operation, HTTP requests sent (retries included), body bytes."""

    calls: collections.Counter = field(default_factory=collections.Counter)
    sends: int = 0
    sent: int = 0
    received: int = 0

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    def ops(self) -> str:
        return ", ".join(f"{op} {n}" for op, n in sorted(self.calls.items(), key=lambda x: -x[1]))


class Meter:
    """Counts what a boto3 client sends, through botocore's event hooks: ``before-call``
    (one per API call), ``before-send`` (one per HTTP request, its body's length) and
    ``after-call`` (the answer's Content-Length)."""

    def __init__(self) -> None:
        self.tally = Tally()
        self._lock = threading.Lock()
        self._clients: set[int] = set()

    def attach(self, client: Any) -> None:
        if id(client) in self._clients:
            return
        self._clients.add(id(client))
        events = client.meta.events
        events.register("before-call.s3", self._call)
        events.register("before-send.s3", self._send)
        events.register("after-call.s3", self._answer)

    def _call(self, model: Any, **_: Any) -> None:
        with self._lock:
            self.tally.calls[model.name] += 1

    def _send(self, request: Any, **_: Any) -> None:
        body = request.body
        size = len(body) if isinstance(body, bytes | bytearray) else int(
            request.headers.get("Content-Length", 0) or 0)
        with self._lock:
            self.tally.sends += 1
            self.tally.sent += size

    def _answer(self, http_response: Any, **_: Any) -> None:
        size = int(http_response.headers.get("content-length", 0) or 0)
        with self._lock:
            self.tally.received += size

    def take(self) -> Tally:
        with self._lock:
            out, self.tally = self.tally, Tally()
        return out


METER = Meter()


# -- the server and the clients -------------------------------------------------------


@dataclass
class Env:
    server: SeaweedS3
    scratch: Path

    @property
    def keys(self) -> tuple[str, str]:
        key, secret = self.server.admin
        return key, secret

    def s3_options(self, prefix: str = WAL_PREFIX) -> dict[str, str]:
        key, secret = self.keys
        return {"path": f"s3://{BUCKET}/{prefix}", "endpoint_url": self.server.endpoint,
                "access_key_id": key, "secret_access_key": secret}

    def s3_namespace(self, name: str, create: bool = True) -> Namespace:
        store = open_store("s3", name, **self.s3_options())
        METER.attach(store.client)
        return Namespace(store, create=create)

    def file_namespace(self, name: str) -> Namespace:
        return Namespace(open_store("file", name, path=str(self.scratch / "file")))

    def boto3(self) -> Any:
        """A boto3 client configured as the backend's (``client._make_client``): path
        style, checksums only where required, 5 standard attempts, 32 connections."""
        import boto3
        from botocore.config import Config

        key, secret = self.keys
        client = boto3.client(
            "s3", endpoint_url=self.server.endpoint, region_name=REGION,
            aws_access_key_id=key, aws_secret_access_key=secret,
            config=Config(retries={"mode": "standard", "total_max_attempts": 5},
                          connect_timeout=10, read_timeout=60, max_pool_connections=32,
                          request_checksum_calculation="when_required",
                          response_checksum_validation="when_required",
                          s3={"addressing_style": "path"}))
        METER.attach(client)
        return client

    def obstore(self) -> Any:
        from obstore.store import S3Store

        key, secret = self.keys
        return S3Store(BUCKET, endpoint=self.server.endpoint, access_key_id=key,
                       secret_access_key=secret, region=REGION,
                       virtual_hosted_style_request=False,
                       client_options={"allow_http": True})


# -- rows and helpers -----------------------------------------------------------------


def typed_rows(start: int, n: int) -> pa.Table:
    """``n`` rows of 6 typed columns, ~64 B a row: what an event table looks like."""
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    countries = np.array(["DE", "FR", "US", "JP", "BR", "IN", "NG", "CA"])
    raw = rng.integers(97, 123, size=n * 24, dtype=np.uint8).tobytes()
    offsets = np.arange(0, (n + 1) * 24, 24, dtype=np.int32)
    return pa.table({
        "id": pa.array(ids),
        "ts": pa.array(1_700_000_000_000_000 + ids * 1000, pa.timestamp("us", "UTC")),
        "user": pa.array(rng.integers(0, 1 << 30, n, dtype=np.int32)),
        "amount": pa.array(rng.random(n) * 100),
        "country": pa.array(countries[rng.integers(0, len(countries), n)]),
        "note": pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                       pa.py_buffer(raw)]),
    })


def step_tables(rows: int, steps: int) -> list[pa.Table]:
    per = -(-rows // steps)
    return [typed_rows(s * per, min(per, rows - s * per)) for s in range(steps)
            if rows - s * per > 0]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def med(values: list[float]) -> float:
    return statistics.median(values)


def alternate(fns: dict[str, Callable[[int], Any]], reps: int,
              log: Callable[[str], None]) -> dict[str, list[Any]]:
    """One warm-up round, then ``reps`` rounds; the order of the sides alternates."""
    out: dict[str, list[Any]] = {k: [] for k in fns}
    names = list(fns)
    for rep in range(reps + 1):
        for name in names if rep % 2 == 0 else names[::-1]:
            value = fns[name](rep)
            log(f"    round {rep}{' (warm-up)' if rep == 0 else ''} {name}: {value}")
            if rep:
                out[name].append(value)
    return out


def objects(client: Any, prefix: str) -> list[tuple[str, int]]:
    """(key, size) of every object below ``prefix``, in key order."""
    out: list[tuple[str, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
        out += [(item["Key"], int(item["Size"])) for item in page.get("Contents", ())]
    return out


def delete_prefix(client: Any, prefix: str) -> None:
    keys = [k for k, _ in objects(client, prefix)]
    for i in range(0, len(keys), 1000):
        client.delete_objects(Bucket=BUCKET, Delete={
            "Objects": [{"Key": k} for k in keys[i:i + 1000]], "Quiet": True})


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.1f}"


# -- 1 and 2: sink and source ----------------------------------------------------------


@dataclass
class WriteTimes:
    total_s: float
    append_s: float  # write + receipt of every step (the entries durable, uncommitted)
    commit_s: float

    def __str__(self) -> str:
        return f"{self.total_s:.2f} s (appends {self.append_s:.2f}, commits {self.commit_s:.2f})"


def wal_write(ns: Namespace, tables: list[pa.Table]) -> WriteTimes:
    append_s = commit_s = 0.0
    start = time.perf_counter()
    for step, table in enumerate(tables):
        t0 = time.perf_counter()
        attempt = ns.begin("bench", step)
        attempt.write("t", table)
        attempt.receipt()
        t1 = time.perf_counter()
        attempt.commit()
        append_s += t1 - t0
        commit_s += time.perf_counter() - t1
    return WriteTimes(time.perf_counter() - start, append_s, commit_s)


def wal_read(ns: Namespace) -> tuple[float, int]:
    start = time.perf_counter()
    rows = 0
    for step in ns.steps():
        for sb in ns.read_step(step):
            rows += sum(b.num_rows for b in sb.batches)
    return time.perf_counter() - start, rows


@dataclass
class SinkSource:
    rows: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # the region objects of a WAL round
    s3_ns: str = ""  # a namespace the sink wrote, for the read
    file_ns: str = ""


def sink_and_source(env: Env, args: argparse.Namespace, log: Callable[[str], None]
                    ) -> SinkSource:
    tables = step_tables(args.rows, args.steps)
    data_bytes = sum(t.nbytes for t in tables)
    raw = env.boto3()
    out = SinkSource()
    region_prefix = f"{WAL_PREFIX}/{{ns}}/logs/{region_log_name(0)}/e/"

    def written(make_ns: Callable[[str], Namespace], rep: int) -> tuple[str, WriteTimes]:
        """A fresh namespace's name, and the times of writing the steps into it."""
        name = f"sink{rep}{uuid.uuid4().hex[:6]}"
        ns = make_ns(name)
        try:
            return name, wal_write(ns, tables)
        finally:
            ns.close()

    def s3_wal(rep: int) -> WriteTimes:
        name, times = written(env.s3_namespace, rep)
        if not out.bodies:  # the objects the WAL wrote: the raw side's bodies
            listed = objects(raw, region_prefix.format(ns=name))
            out.bodies = [raw.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k, _ in listed]
        if out.s3_ns:
            delete_prefix(raw, f"{WAL_PREFIX}/{out.s3_ns}/")
        out.s3_ns = name
        return times

    def file_wal(rep: int) -> WriteTimes:
        name, times = written(env.file_namespace, rep)
        if out.file_ns:
            shutil.rmtree(env.scratch / "file" / out.file_ns, ignore_errors=True)
        out.file_ns = name
        return times

    def raw_put(rep: int) -> float:
        prefix = f"raw/put{rep}/"
        start = time.perf_counter()
        for i, body in enumerate(out.bodies):
            raw.put_object(Bucket=BUCKET, Key=f"{prefix}{i:020d}", Body=body)
        secs = time.perf_counter() - start
        delete_prefix(raw, prefix)
        return secs

    log(f"1. sink: {args.rows:,} rows ({mb(data_bytes)} MB in Arrow) in {len(tables)} steps")
    s3_wal(-1)  # the objects the raw side PUTs
    sizes = [len(b) for b in out.bodies]
    log(f"  region objects: {len(sizes)}, {mb(sum(sizes))} MB, sizes {sorted(set(sizes))[:4]}...")
    sink = alternate({"s3": s3_wal, "raw": raw_put, "file": file_wal}, args.reps, log)

    def s3_read(rep: int) -> float:
        ns = env.s3_namespace(out.s3_ns, create=False)
        try:
            secs, rows = wal_read(ns)
        finally:
            ns.close()
        assert rows == args.rows, (rows, args.rows)
        return secs

    def file_read(rep: int) -> float:
        ns = Namespace(open_store("file", out.file_ns, path=str(env.scratch / "file")),
                       create=False)
        try:
            secs, rows = wal_read(ns)
        finally:
            ns.close()
        assert rows == args.rows, (rows, args.rows)
        return secs

    keys = [k for k, _ in objects(raw, region_prefix.format(ns=out.s3_ns))]

    def get(key: str) -> int:
        return len(raw.get_object(Bucket=BUCKET, Key=key)["Body"].read())

    def raw_get(rep: int) -> float:
        start = time.perf_counter()
        got = sum(get(k) for k in keys)
        assert got == sum(sizes)
        return time.perf_counter() - start

    pool = ThreadPoolExecutor(16)

    def raw_get16(rep: int) -> float:
        start = time.perf_counter()
        got = sum(pool.map(get, keys))
        assert got == sum(sizes)
        return time.perf_counter() - start

    log("2. source")
    source = alternate({"s3": s3_read, "raw": raw_get, "raw16": raw_get16, "file": file_read},
                       args.reps, log)
    pool.shutdown()

    s3_total = med([t.total_s for t in sink["s3"]])
    s3_append = med([t.append_s for t in sink["s3"]])
    s3_commit = med([t.commit_s for t in sink["s3"]])
    raw_s = med(sink["raw"])
    file_total = med([t.total_s for t in sink["file"]])
    obj = sum(sizes)
    rate = lambda s: f"{mb(obj / s)}"  # noqa: E731 - MB/s of the region objects' bytes
    out.rows = [
        f"{args.rows:,} rows in {len(tables)} steps of {args.rows // len(tables):,} "
        f"(6 columns, {mb(data_bytes)} MB in Arrow), one writer, region 0: "
        f"{len(sizes)} region objects, {mb(obj)} MB (sizes {mb(min(sizes))}-{mb(max(sizes))} MB). "
        f"Medians of {args.reps} rounds after a warm-up; ratio = raw time / WAL time.",
        "",
        "### 1. Sink: WAL appends on S3 vs raw boto3 PUTs of the same objects",
        "",
        "| side | seconds | MB/s (region objects) | ratio raw / this |",
        "|---|---:|---:|---:|",
        f"| raw boto3 `put_object`, the same {len(sizes)} objects one after another | "
        f"{raw_s:.2f} | {rate(raw_s)} | 1.00 |",
        f"| WAL on S3, appends only (`write` + `receipt`, every step) | {s3_append:.2f} | "
        f"{rate(s3_append)} | {raw_s / s3_append:.2f} |",
        f"| WAL on S3, whole steps (`begin` + `write` + `commit`) | {s3_total:.2f} | "
        f"{rate(s3_total)} | {raw_s / s3_total:.2f} |",
        f"| (of which the {len(tables)} `commit()` calls) | {s3_commit:.2f} | | |",
        f"| WAL on the file backend, whole steps | {file_total:.2f} | {rate(file_total)} | "
        f"{raw_s / file_total:.2f} |",
        "",
        f"Rounds (s): WAL on S3 {[round(t.total_s, 2) for t in sink['s3']]}, raw "
        f"{[round(s, 2) for s in sink['raw']]}, file "
        f"{[round(t.total_s, 2) for t in sink['file']]}.",
        "",
        "### 2. Source: WAL reads on S3 vs raw boto3 GETs of the same objects",
        "",
        "| side | seconds | MB/s (region objects) | ratio raw / this |",
        "|---|---:|---:|---:|",
    ]
    raw_r = med(source["raw"])
    for label, key in (
            ("raw boto3 `get_object`, one at a time", "raw"),
            ("raw boto3 `get_object`, 16 at a time (the log's read-ahead)", "raw16"),
            ("WAL on S3: `ns.read_step` of every step, Arrow decoded", "s3"),
            ("WAL on the file backend: the same read", "file")):
        s = med(source[key])
        out.rows.append(f"| {label} | {s:.2f} | {rate(s)} | {raw_r / s:.2f} |")
    out.rows += ["", "Rounds (s): " + ", ".join(
        f"{k} {[round(s, 2) for s in v]}" for k, v in source.items()) + "."]
    return out


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


def tally_row(label: str, t: Tally, secs: float | None = None) -> str:
    cells = [str(t.calls.get(op, 0)) for op in
             ("PutObject", "GetObject", "ListObjectsV2", "HeadObject", "DeleteObjects")]
    other = t.total - sum(int(c) for c in cells)
    return (f"| {label} | {t.total} | " + " | ".join(cells) + f" | {other} | "
            f"{t.sent:,} | {t.received:,} | {'' if secs is None else f'{1000 * secs:.0f}'} |")


TALLY_HEAD = ["| what | requests | PutObject | GetObject | ListObjectsV2 | HeadObject | "
              "DeleteObjects | other | bytes sent | bytes received | ms |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


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


# -- 5: boto3 vs obstore ------------------------------------------------------------


def clients_section(env: Env, bodies: list[bytes], args: argparse.Namespace,
                    log: Callable[[str], None]) -> list[str]:
    import obstore

    log("5. boto3 vs obstore")
    b3 = env.boto3()
    ob = env.obstore()
    pool = ThreadPoolExecutor(4)

    def boto_put(key: str, body: bytes) -> None:
        b3.put_object(Bucket=BUCKET, Key=key, Body=body, IfNoneMatch="*")

    def ob_put(key: str, body: bytes) -> None:
        obstore.put(ob, key, body, mode="create", use_multipart=False)

    def bulk(put: Callable[[str, bytes], None], workers: int) -> Callable[[int], float]:
        def run(rep: int) -> float:
            prefix = f"clients/{uuid.uuid4().hex[:8]}/"
            keys = [f"{prefix}{i:020d}" for i in range(len(bodies))]
            start = time.perf_counter()
            if workers == 1:
                for k, b in zip(keys, bodies, strict=True):
                    put(k, b)
            else:
                list(pool.map(put, keys, bodies))
            secs = time.perf_counter() - start
            delete_prefix(b3, prefix)
            return secs
        return run

    small = b"x" * 200  # about a commits record

    def timed_ms(call: Callable[[int], Any]) -> tuple[float, float]:
        ms = []
        for i in range(args.commits):
            t0 = time.perf_counter()
            call(i)
            ms.append(1000 * (time.perf_counter() - t0))
        return pct(ms, 0.5), pct(ms, 0.99)

    def latency(put: Callable[[str, bytes], None]) -> Callable[[int], tuple[float, float]]:
        def run(rep: int) -> tuple[float, float]:
            prefix = f"clients/{uuid.uuid4().hex[:8]}/"
            out = timed_ms(lambda i: put(f"{prefix}{i:020d}", small))
            delete_prefix(b3, prefix)
            return out
        return run

    # the small reads a commit makes (the low mark, the listing of the end, a record)
    b3.put_object(Bucket=BUCKET, Key="clients-small/r", Body=small)
    small_reads = {
        "GET": (lambda _: b3.get_object(Bucket=BUCKET, Key="clients-small/r")["Body"].read(),
                lambda _: obstore.get(ob, "clients-small/r").bytes()),
        "LIST": (lambda _: b3.list_objects_v2(Bucket=BUCKET, Prefix="clients-small/"),
                 lambda _: ob.list_with_delimiter("clients-small/")),
        "HEAD": (lambda _: b3.head_object(Bucket=BUCKET, Key="clients-small/r"),
                 lambda _: ob.head("clients-small/r")),
    }
    reads = alternate({f"{c} {op}": (lambda f: lambda _: timed_ms(f))(fns[i])
                       for op, fns in small_reads.items()
                       for i, c in enumerate(("boto3", "obstore"))}, args.reps, log)
    cpu: dict[str, float] = {}
    for i, c in enumerate(("boto3", "obstore")):  # CPU of this process per small GET
        c0 = time.process_time()
        for n in range(args.commits):
            small_reads["GET"][i](n)
        cpu[c] = 1000 * (time.process_time() - c0) / args.commits

    def lost_race(rep: int) -> bool:  # both refuse a second create (412)
        key = f"clients/{uuid.uuid4().hex}"
        ob_put(key, b"a")
        try:
            ob_put(key, b"b")
        except Exception as exc:  # noqa: BLE001 - obstore's AlreadyExistsError
            return "exist" in type(exc).__name__.lower() or "412" in str(exc)
        return False

    assert lost_race(0), "obstore's create mode did not refuse a second create"
    bulk_s = alternate({"boto3 1": bulk(boto_put, 1), "obstore 1": bulk(ob_put, 1),
                        "boto3 4": bulk(boto_put, 4), "obstore 4": bulk(ob_put, 4)},
                       args.reps, log)
    lat = alternate({"boto3": latency(boto_put), "obstore": latency(ob_put)}, args.reps,
                    log)
    pool.shutdown()
    total = sum(len(b) for b in bodies)
    rows = ["### 5. Client choice: boto3 vs obstore (conditional creates)",
            "",
            f"The section-1 region objects ({len(bodies)}, {mb(total)} MB) PUT with "
            "`If-None-Match: *` by each client: boto3 "
            "`put_object(..., IfNoneMatch=\"*\")` with the backend's client settings, obstore "
            f"{obstore.__version__} `obstore.put(store, key, data, mode=\"create\", "
            "use_multipart=False)` on an `S3Store` (path style, `allow_http`); "
            "one at a time, and 4 at a time from a thread pool. Then a 200-byte create "
            f"(a commits record's size) {args.commits} times in a row. Both refuse a second "
            "create of one key (checked).",
            "",
            "| client | PUT 1 at a time: s | MB/s | PUT 4 at a time: s | MB/s |",
            "|---|---:|---:|---:|---:|"]
    for name in ("boto3", "obstore"):
        one, four = med(bulk_s[f"{name} 1"]), med(bulk_s[f"{name} 4"])
        rows.append(f"| {name} | {one:.2f} | {mb(total / one)} | {four:.2f} | "
                    f"{mb(total / four)} |")
    b1, o1 = med(bulk_s["boto3 1"]), med(bulk_s["obstore 1"])
    b4, o4 = med(bulk_s["boto3 4"]), med(bulk_s["obstore 4"])
    rows += ["", "Small requests (200-byte object; p50 / p99 ms of "
             f"{args.commits} in a row, median of rounds) and this process's CPU per small GET:",
             "", "| client | GET | LIST (1 key) | HEAD | conditional PUT | CPU ms per GET |",
             "|---|---:|---:|---:|---:|---:|"]
    for name in ("boto3", "obstore"):
        cells = []
        for op in ("GET", "LIST", "HEAD"):
            got = reads[f"{name} {op}"]
            cells.append(f"{med([p for p, _ in got]):.2f} / {med([p for _, p in got]):.2f}")
        cells.append(f"{med([p for p, _ in lat[name]]):.2f} / "
                     f"{med([p for _, p in lat[name]]):.2f}")
        rows.append(f"| {name} | " + " | ".join(cells) + f" | {cpu[name]:.2f} |")
    b1, o1 = med(bulk_s["boto3 1"]), med(bulk_s["obstore 1"])
    b4, o4 = med(bulk_s["boto3 4"]), med(bulk_s["obstore 4"])
    p50 = {c: {op: med([p for p, _ in reads[f"{c} {op}"]]) for op in ("GET", "LIST")} | {
        "PUT": med([p for p, _ in lat[c]])} for c in ("boto3", "obstore")}
    commit = {c: 3 * p50[c]["LIST"] + p50[c]["PUT"] for c in p50}
    rows += ["", f"obstore / boto3 time: {o1 / b1:.2f} for the large PUTs one at a time, "
             f"{o4 / b4:.2f} 4 at a time; {p50['obstore']['PUT'] / p50['boto3']['PUT']:.2f} for "
             f"a small create, {p50['obstore']['GET'] / p50['boto3']['GET']:.2f} for a small "
             f"GET (below 1: obstore is faster). A micro-batch commit's 4 requests (3 LIST, "
             f"1 conditional PUT; section 4) cost {commit['boto3']:.1f} ms at boto3's p50s and "
             f"{commit['obstore']:.1f} ms at obstore's."]
    return rows


# -- the report -----------------------------------------------------------------------


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores ({cpu}), {platform.system()} {platform.release()}"


def versions() -> str:
    import boto3
    import obstore

    return (f"Python {platform.python_version()}, boto3 {boto3.__version__}, obstore "
            f"{obstore.__version__}, pyarrow {pa.__version__}")


NOTES = "\n## Notes\n"  # from this heading on, RESULTS-s3.md is kept across runs


def write_report(path: Path, body: list[str], args: argparse.Namespace, secs: float,
                 weed_version: str) -> str:
    argv = " ".join(sys.argv[1:])
    head = [
        "# The S3 log backend vs the raw S3 clients",
        "",
        f"`python bench/s3_log.py {argv}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{secs / 60:.1f} min; {machine()}; load average {os.getloadavg()[0]:.1f} at the "
        f"end. SeaweedFS {weed_version} (`weed server -s3`, one process, started by the "
        "bench through `tests/s3_server.py`) on 127.0.0.1, data on the same disk; "
        f"{versions()}. The server shares the 2 cores with the client, so absolute rates "
        "are this machine's, not S3's: read the ratios, whose sides ran in the same rounds.",
        "",
    ]
    text = "\n".join(head + body) + "\n"
    old = path.read_text() if path.exists() else ""
    if NOTES in old:  # the hand-written reading of the numbers stays
        text += old[old.index(NOTES):]
    path.write_text(text)
    return text


def weed_version() -> str:
    import subprocess

    from s3_server import weed_binary

    try:
        out = subprocess.run([weed_binary(), "version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    words = out.split()  # "version 8000GB 4.48 pypi linux amd64"
    return words[2] if len(words) > 2 else out.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rows", type=int, default=1_000_000, help="section 1-2 rows")
    parser.add_argument("--steps", type=int, default=10, help="section 1-2 steps")
    parser.add_argument("--commits", type=int, default=200, help="section 3 commits")
    parser.add_argument("--batches", type=int, default=7, help="section 4 micro-batches")
    parser.add_argument("--opens", default="1000,1500,1990,5000",
                        help="section 4: the history sizes (steps) of the fresh opens")
    parser.add_argument("--sections", default="1,2,3,4,5",
                        help="1 and 2 run together; 5 needs the objects of 1")
    parser.add_argument("--out", default=str(HERE / "RESULTS-s3.md"))
    args = parser.parse_args()
    sections = {int(s) for s in args.sections.split(",")}
    began = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - began:6.1f}s] {msg}", flush=True)

    OUT.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="s3-bench-", dir=OUT))
    server = SeaweedS3.start(scratch / "s3")
    log(f"SeaweedFS pid {server.pid} at {server.endpoint}, up in {server.started_in_s:.1f} s")
    body: list[str] = []
    try:
        server.make_bucket(BUCKET)
        env = Env(server, scratch)
        bodies: list[bytes] = []
        if sections & {1, 2, 5}:
            ss = sink_and_source(env, args, log)
            bodies = ss.bodies
            if sections & {1, 2}:
                body += [*ss.rows, ""]
        lat_ns = None
        if 3 in sections:
            rows, lat_ns = latency_section(env, args, log)
            body += [*rows, ""]
        if 4 in sections:
            body += [*requests_section(env, args, lat_ns, log), ""]
        if 5 in sections:
            body += [*clients_section(env, bodies, args, log), ""]
        version = weed_version()
    finally:
        server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    text = write_report(Path(args.out), body, args, time.perf_counter() - began, version)
    print(text)


if __name__ == "__main__":
    main()
