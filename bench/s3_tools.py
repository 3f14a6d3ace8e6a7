"""The pieces bench/s3_log.py's sections share: the S3 server and clients it measures,
request counting through botocore's event hooks, rows, statistics and the report.

A module of its own so that each section reads as what it measures; run
``python bench/s3_log.py``, not this.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT)]

from pyspark_durable.log import open_store  # noqa: E402
from pyspark_durable.wal import Namespace  # noqa: E402
from tests.s3_server import REGION, SeaweedS3  # noqa: E402

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


# -- a namespace written and read ---------------------------------------------------


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


# -- request tallies as table rows ---------------------------------------------------


def tally_row(label: str, t: Tally, secs: float | None = None) -> str:
    cells = [str(t.calls.get(op, 0)) for op in
             ("PutObject", "GetObject", "ListObjectsV2", "HeadObject", "DeleteObjects")]
    other = t.total - sum(int(c) for c in cells)
    return (f"| {label} | {t.total} | " + " | ".join(cells) + f" | {other} | "
            f"{t.sent:,} | {t.received:,} | {'' if secs is None else f'{1000 * secs:.0f}'} |")


TALLY_HEAD = ["| what | requests | PutObject | GetObject | ListObjectsV2 | HeadObject | "
              "DeleteObjects | other | bytes sent | bytes received | ms |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]


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

    from tests.s3_server import weed_binary

    try:
        out = subprocess.run([weed_binary(), "version"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    words = out.split()  # "version 8000GB 4.48 pypi linux amd64"
    return words[2] if len(words) > 2 else out.strip()
