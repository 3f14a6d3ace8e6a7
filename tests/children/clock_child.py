"""A host with its own clock: one WAL operation in a process that test_clocks.py starts
with ``LD_PRELOAD=clock_shim.so CLOCK_SKEW_MS=...`` (every wall-clock read is skewed).

Usage: python clock_child.py JSON, where JSON names ``op``, ``path``, ``namespace`` and
the op's arguments. Prints one JSON line: ``now_ms`` (this host's clock, so the test can
check the skew took effect) and either ``result`` or ``error`` (the typed error's class
name and message, and ``own_ms``/``wal_ms`` for ClockSkew).

Ops:
  batch      a one-off writer (a batch write through the Python API): its start is this
             host's clock, as a caller of ``Namespace.commit(started_ms=...)`` passes it
  batch-sink a one-off writer as the Spark sink's driver starts it (``one_off_start_ms``)
  stream     writer ``writer`` commits writer step ``step`` (consecutive), or returns the
             step that already committed it (a recommit)
  clean      one cleaner pass with ``grace_ms``; the result is the first retained step
"""

from __future__ import annotations

import json
import sys
import time

import pyarrow as pa

from pyspark_durable.errors import DurableWalError
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)


def rows(tag: str) -> pa.Table:
    return pa.table({"tag": pa.array([tag], pa.string())})


def commit(ns: Namespace, writer: str, step: int, started_ms: int | None,
           consecutive: bool) -> int:
    attempt = ns.begin(writer, step)
    attempt.write("t", rows(f"{writer}/{step}"))
    return ns.commit(writer, step, [attempt.receipt()], consecutive=consecutive,
                     started_ms=started_ms)


def run(args: dict) -> object:
    ns = Namespace(open_store("file", args["namespace"], path=args["path"]))
    own_ms = int(time.time() * 1000)
    op = args["op"]
    if op == "batch":
        return commit(ns, args["writer"], 0, own_ms, consecutive=False)
    if op == "batch-sink":
        info = getattr(ns, "info", ns)  # older code answers on the namespace itself
        start = getattr(info, "one_off_start_ms", lambda ms: ms)(own_ms)  # (older still: own)
        return commit(ns, args["writer"], 0, start, consecutive=False)
    if op == "stream":
        return commit(ns, args["writer"], args["step"], None, consecutive=True)
    if op == "clean":
        return Cleaner(ns, grace_ms=args["grace_ms"]).run_once().first_retained_step
    raise ValueError(f"unknown op {op!r}")


def main() -> None:
    args = json.loads(sys.argv[1])
    out: dict = {"now_ms": int(time.time() * 1000)}
    try:
        out["result"] = run(args)
    except DurableWalError as exc:
        out["error"] = {"type": type(exc).__name__, "message": str(exc),
                        "own_ms": getattr(exc, "own_ms", None),
                        "wal_ms": getattr(exc, "wal_ms", None)}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
