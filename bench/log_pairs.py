"""Pair 4, the log layer: file backend vs a plain fdatasync loop; Kafka vs its raw client.

File: ``threads`` appender threads call ``FileLog.append`` with one entry (1,000 rows,
~100 KB Arrow IPC) at a time, so the writer thread's group commit gathers about one
entry per thread per fsync. The peer is the ideal of that: one loop that writes the
same frames ``threads`` at a time with one ``os.write`` + ``os.fdatasync`` and waits
until ``group_commit_interval_ms`` after the previous fsync, as ``FileLog._write_loop``
does, without threads, futures, locks or the frame encoding. With one thread (a lone
appender) neither side waits: the file log batches only concurrent appends, so the
peer is a plain write + fdatasync loop.

Kafka: ``KafkaLog.append`` / ``read`` on each client (``confluent`` or ``kafka-python``)
vs the raw client with the same settings (``bench_kafka_log.measure``).
"""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench_kafka_log import RAW_NAMES, ROWS_PER_ENTRY, TARGETS, make_records, measure
from common import OUT, Result, higher_is_better

from pyspark_durable.log.base import Record
from pyspark_durable.log.file import FileLogStore, encode_frame

INTERVAL_MS = 10.0


def file_append_pair(entries: int, threads: int, reps: int,
                     log: Callable[[str], None]) -> Result:
    records = make_records(entries)
    frames = [encode_frame(i, 0, r) for i, r in enumerate(records)]
    nbytes = sum(len(f) for f in frames)

    def ours() -> float:
        root = tempfile.mkdtemp(prefix="filelog-", dir=OUT)
        store = FileLogStore("bench", path=root, group_commit_interval_ms=INTERVAL_MS)
        region = store.open_region(0)
        shares = [records[i::threads] for i in range(threads)]

        def worker(share: list[Record]) -> None:
            for r in share:
                region.append([r])

        pool = [threading.Thread(target=worker, args=(s,)) for s in shares]
        start = time.perf_counter()
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        secs = time.perf_counter() - start
        assert region.high_watermark() == entries
        store.close()
        shutil.rmtree(root)
        return nbytes / secs / 1e6

    def peer() -> float:
        root = Path(tempfile.mkdtemp(prefix="rawlog-", dir=OUT))
        fd = os.open(root / "raw.seg", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        start = last_sync = time.perf_counter()
        last_sync -= 1.0
        for i in range(0, len(frames), threads):
            wait_s = last_sync + INTERVAL_MS / 1000 - time.perf_counter()
            if threads > 1 and wait_s > 0:  # one appender: a plain write+fdatasync loop
                time.sleep(wait_s)
            view = memoryview(b"".join(frames[i : i + threads]))
            while view:
                view = view[os.write(fd, view):]
            os.fdatasync(fd)
            last_sync = time.perf_counter()
        secs = time.perf_counter() - start
        os.close(fd)
        shutil.rmtree(root)
        return nbytes / secs / 1e6

    out: dict[str, list[float]] = {"ours": [], "peer": []}
    for rep in range(reps + 1):
        order = (("ours", ours), ("peer", peer)) if rep % 2 == 0 else \
            (("peer", peer), ("ours", ours))
        for name, fn in order:
            value = fn()
            if rep:
                out[name].append(value)
    log(f"  file append MB/s: {out}")
    who = "one appender" if threads == 1 else f"{threads} appenders"
    how = "no group-commit wait on either side" if threads == 1 else \
        f"{INTERVAL_MS:.0f} ms group commit"
    return higher_is_better(f"4 log append [file]: FileLog vs write+fdatasync loop, {who}",
                            out["ours"], out["peer"], "MB/s", 0.8,
                            f"{entries} x ~100 KB entries, {how}")


def kafka_log_pairs(address: str, client: str, entries: int, per_append: int, reps: int,
                    log: Callable[[str], None]) -> list[Result]:
    """KafkaLog append / read on ``client`` vs the raw client with the log's settings:
    the log layer's own cost on top of the client it cannot do without."""
    records = make_records(entries)
    results = measure(address, records, per_append, reps, client)
    rows = entries * ROWS_PER_ENTRY
    out = []
    for label, ours, raw in (("append", "ours_a", "raw_a"), ("read", "ours_r", "raw_r")):
        o = [b / s / 1e6 for s, b in results[ours]]
        r = [b / s / 1e6 for s, b in results[raw]]
        paired = statistics.median(rs / os_ for (os_, _), (rs, _) in
                                   zip(results[ours], results[raw], strict=True))
        log(f"  kafka/{client} {label} MB/s: ours {o} raw {r}")
        out.append(higher_is_better(
            f"4 log {label} [kafka/{client}]: KafkaLog vs {RAW_NAMES[client]}", o, r, "MB/s",
            TARGETS[client], f"{rows:,} rows, {per_append} entries/call; "
            f"paired ratio {paired:.2f}"))
    return out
