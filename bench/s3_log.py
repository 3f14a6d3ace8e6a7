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
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from common import OUT  # noqa: E402
from s3_requests import latency_section, requests_section  # noqa: E402
from s3_tools import (  # noqa: E402
    BUCKET,
    WAL_PREFIX,
    Env,
    WriteTimes,
    alternate,
    delete_prefix,
    mb,
    med,
    objects,
    pct,
    step_tables,
    wal_read,
    wal_write,
    weed_version,
    write_report,
)

from pyspark_durable.log import Record, open_store, region_log_name  # noqa: E402
from pyspark_durable.wal import Namespace  # noqa: E402
from tests.s3_server import SeaweedS3  # noqa: E402

# -- 1 and 2: sink and source ----------------------------------------------------------


@dataclass
class SinkSource:
    rows: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)  # the region objects of a WAL round
    # every object a WAL round wrote (region objects, commits records, metadata), in key
    # order, less those its namespace held when created: what the whole steps move
    step_objects: list[bytes] = field(default_factory=list)
    s3_ns: str = ""  # a namespace the sink wrote, for the read
    file_ns: str = ""
    records: list[list[Record]] = field(default_factory=list)  # each step's entries


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

    def created_keys() -> set[str]:
        """The keys (below the namespace) a namespace holds once created, before a step."""
        name = f"probe{uuid.uuid4().hex[:6]}"
        env.s3_namespace(name).close()
        base = f"{WAL_PREFIX}/{name}/"
        keys = {k[len(base):] for k, _ in objects(raw, base)}
        delete_prefix(raw, base)
        return keys

    def body(key: str) -> bytes:
        return raw.get_object(Bucket=BUCKET, Key=key)["Body"].read()

    def s3_wal(rep: int) -> WriteTimes:
        name, times = written(env.s3_namespace, rep)
        if not out.bodies:  # the objects the WAL wrote: the raw side's bodies
            out.bodies = [body(k) for k, _ in objects(raw, region_prefix.format(ns=name))]
            base, before = f"{WAL_PREFIX}/{name}/", created_keys()
            out.step_objects = [body(k) for k, _ in objects(raw, base)
                                if k[len(base):] not in before]
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

    def raw_puts(objects_of: Callable[[], list[bytes]], tag: str) -> Callable[[int], float]:
        """Raw boto3 PUTs of ``objects_of()``, one after another, as they are."""
        def run(rep: int) -> float:
            prefix = f"raw/{tag}{rep}/"
            start = time.perf_counter()
            for i, body in enumerate(objects_of()):
                raw.put_object(Bucket=BUCKET, Key=f"{prefix}{i:020d}", Body=body)
            secs = time.perf_counter() - start
            delete_prefix(raw, prefix)
            return secs
        return run

    raw_put = raw_puts(lambda: out.bodies, "put")
    # every object the whole steps wrote: the raw client moving the same bytes as the
    # WAL's steps, commits records included
    raw_put_all = raw_puts(lambda: out.step_objects, "all")

    def step_records() -> list[list[Record]]:
        """Each step's entries as the WAL wrote them (key, value, headers): the log-layer
        side appends them as they are, one append per step, as the WAL's task did."""
        ns = env.s3_namespace(out.s3_ns, create=False)
        try:
            region = ns.store.open_region(0)
            steps = []
            for step in ns.steps():
                [run] = ns.step_commit(step).runs
                steps.append([Record(e.key, e.value, e.headers)
                              for e in region.read(run.start, run.end)])
            return steps
        finally:
            ns.close()

    def log_append(rep: int) -> float:
        """S3Log.append alone, its records encoded before the clock starts: the log layer
        against the raw PUTs, as pair 4 holds the Kafka log to its raw producer."""
        name = f"log{rep}{uuid.uuid4().hex[:6]}"
        ns = env.s3_namespace(name)
        try:
            region = ns.store.open_region(0)
            start = time.perf_counter()
            for records in out.records:
                region.append(records)
            secs = time.perf_counter() - start
        finally:
            ns.close()
        delete_prefix(raw, f"{WAL_PREFIX}/{name}/")
        return secs

    log(f"1. sink: {args.rows:,} rows ({mb(data_bytes)} MB in Arrow) in {len(tables)} steps")
    s3_wal(-1)  # the objects the raw side PUTs
    out.records = step_records()
    sizes = [len(b) for b in out.bodies]
    log(f"  region objects: {len(sizes)}, {mb(sum(sizes))} MB, sizes {sorted(set(sizes))[:4]}...")
    sink = alternate({"s3": s3_wal, "raw": raw_put, "raw_all": raw_put_all,
                      "log": log_append, "file": file_wal}, args.reps, log)

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
    raw_all_s = med(sink["raw_all"])
    log_s = med(sink["log"])
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
        f"| S3 log alone: `S3Log.append` of each step's entries, encoded before timing | "
        f"{log_s:.2f} | {rate(log_s)} | {raw_s / log_s:.2f} |",
        f"| WAL on S3, appends only (`write` + `receipt`, every step) | {s3_append:.2f} | "
        f"{rate(s3_append)} | {raw_s / s3_append:.2f} |",
        f"| WAL on S3, whole steps (`begin` + `write` + `commit`) | {s3_total:.2f} | "
        f"{rate(s3_total)} | {raw_s / s3_total:.2f} |",
        f"| (of which the {len(tables)} `commit()` calls) | {s3_commit:.2f} | | |",
        f"| raw boto3 `put_object` of every object the whole steps wrote ({len(out.step_objects)}"
        f": the region objects, the commits records, the tables' definitions) | "
        f"{raw_all_s:.2f} | {rate(raw_all_s)} | 1.00 |",
        f"| WAL on S3, whole steps, against that | {s3_total:.2f} | {rate(s3_total)} | "
        f"**{raw_all_s / s3_total:.2f}** |",
        f"| WAL on the file backend, whole steps | {file_total:.2f} | {rate(file_total)} | "
        f"{raw_s / file_total:.2f} |",
        "",
        f"Rounds (s): WAL on S3 {[round(t.total_s, 2) for t in sink['s3']]}, raw "
        f"{[round(s, 2) for s in sink['raw']]}, raw (every object) "
        f"{[round(s, 2) for s in sink['raw_all']]}, S3 log alone "
        f"{[round(s, 2) for s in sink['log']]}, file "
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
