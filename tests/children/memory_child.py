"""Child process for the memory-bound tests: one write or read of a large step, measured.

Usage: python memory_child.py MODE PATH MB ENTRY_MAX_BYTES [BATCH_KB]

MODE:

- ``write-gen``: ``write_step`` of a generator yielding batches of ``BATCH_KB`` (rows
  made as they are asked for, never held whole);
- ``write-table``: ``write_step`` of one ``pa.Table`` of MB megabytes, built before the
  measurement starts (so only what the write adds counts);
- ``read-stream``: ``read_batches`` over the step, each batch dropped once counted;
- ``read-table``: ``read_steps``, the whole table (the unbounded form, for contrast).

A fresh process, so the peak is this operation's alone: the peak RSS (``VmHWM``) is
reset to the current RSS through ``/proc/self/clear_refs`` just before it starts.
Prints one JSON line: ``{"mode", "rows", "bytes", "entries", "seconds", "base_mb",
"peak_mb", "added_mb"}`` (``entries``: of the written step, None for reads).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator

import pyarrow as pa

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)

ROW_BYTES = 1000
TABLE = "big"


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise LookupError(field)


def _reset_peak() -> int:
    """Reset VmHWM to the current RSS (kernel >= 4.0); return the RSS in kB."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kb("VmRSS")


def batches(total_bytes: int, batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """``total_bytes`` of rows (an id and a 1000-byte payload), made batch by batch."""
    rows, total = max(1, batch_bytes // ROW_BYTES), total_bytes // ROW_BYTES
    blob = b"x" * (ROW_BYTES - 8)
    done = 0
    while done < total:
        n = min(rows, total - done)
        yield pa.record_batch({"id": pa.array(range(done, done + n), pa.int64()),
                               "payload": pa.array([blob] * n, pa.binary())})
        done += n


def main() -> None:
    mode, path, mb, entry_max = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    batch_bytes = int(sys.argv[5]) * 1024 if len(sys.argv) > 5 else 1 << 20
    total = mb << 20
    ns = open_namespace({"backend": "file", "namespace": "memory",
                         "options": {"path": path}})
    ns.entry_max_bytes = entry_max
    rows = size = 0
    if mode == "write-table":
        data = pa.Table.from_batches(list(batches(total, 16 << 20)))
        base = _reset_peak()
        start = time.perf_counter()
        write_step(ns, "loader", 0, {TABLE: data})
        size = data.nbytes
    elif mode == "write-gen":
        base = _reset_peak()
        start = time.perf_counter()
        write_step(ns, "loader", 0, {TABLE: batches(total, batch_bytes)})
        size = total
    elif mode == "read-stream":
        from pyspark_durable.endpoint import read_batches  # not in the unbounded version

        base = _reset_peak()
        start = time.perf_counter()
        for batch in read_batches(ns, TABLE):
            rows += batch.num_rows
            size += batch.nbytes
    elif mode == "read-table":
        base = _reset_peak()
        start = time.perf_counter()
        table = read_steps(ns, TABLE)
        rows, size = table.num_rows, table.nbytes
        del table
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    seconds = time.perf_counter() - start
    peak = _status_kb("VmHWM")
    entries = None
    if mode.startswith("write"):  # what the step committed: its rows, in how many entries
        runs = ns.step_commit(0).runs
        rows, entries = sum(r.rows for r in runs), sum(r.entries for r in runs)
    ns.close()
    print(json.dumps({"mode": mode, "rows": rows, "bytes": size, "entries": entries,
                      "seconds": round(seconds, 2),
                      "base_mb": round(base / 1024, 1), "peak_mb": round(peak / 1024, 1),
                      "added_mb": round((peak - base) / 1024, 1)}), flush=True)


if __name__ == "__main__":
    main()
