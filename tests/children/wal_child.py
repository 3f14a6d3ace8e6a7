"""Child process for WAL crash tests: writes and commits steps until killed.

Usage: python wal_child.py BACKEND CONFIG_JSON NAMESPACE MODE STEPS
MODE: ``write`` commits writer steps, ``clean`` also runs the cleaner after each step.
Prints ``ACK <writer_step> <step>`` (flushed) after each commit returns. With the
suffix ``-retry`` (``write-retry``, ``clean-retry``), a writer step whose write or
commit raises a typed error prints ``ERR <writer_step> <Type>: <message>`` and is
written again once, and a cleaner pass that raises prints ``CLEANERR <Type>: <message>``
(the retry rule a user follows on a storage error).
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable

import pyarrow as pa

from pyspark_durable.errors import DurableWalError
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)

WRITER = "crash-writer"


def rows_for(writer_step: int, table: str) -> pa.Table:
    """Deterministic rows of a writer step, so the test can recompute them."""
    n = (writer_step * 7919) % 37 + (0 if table == "a" else 3)
    return pa.table({
        "ws": pa.array([writer_step] * n, pa.int64()),
        "i": pa.array(range(n), pa.int64()),
        "payload": pa.array([f"{table}-{writer_step}-{i}-" + "x" * (i % 50) for i in range(n)],
                            pa.string()),
    })


def write_step(ns: Namespace, ws: int) -> int:
    attempt = ns.begin(WRITER, ws)
    attempt.write("a", rows_for(ws, "a"), region_id=0)
    if random.random() < 0.3:
        # an abandoned attempt of the same writer step: never visible
        ns.begin(WRITER, ws).write("a", rows_for(ws + 1000, "a"), region_id=0)
    attempt.write("b", rows_for(ws, "b"), region_id=1)
    return attempt.commit()


def run(backend: str, config: dict, namespace: str, mode: str, steps: int,
        emit: Callable[[str], None]) -> None:
    """Commit writer steps up to ``steps`` in ``mode``, calling ``emit`` with each line
    the module docstring names (a test that needs no separate process, a writer
    without injected faults, calls this directly)."""
    ns = Namespace(open_store(backend, namespace, **config))
    cleaner = Cleaner(ns, grace_ms=0)
    ns.refresh()
    start = ns.info.newest_committed_writer_step(WRITER) or 0  # redo the last one: a no-op commit
    retry = mode.endswith("-retry")
    for ws in range(start, steps):
        for _ in range(2 if retry else 1):
            try:
                step = write_step(ns, ws)
            except DurableWalError as exc:
                if not retry:
                    raise
                emit(f"ERR {ws} {type(exc).__name__}: {exc}")
                continue
            emit(f"ACK {ws} {step}")
            break
        if mode.startswith("clean") and ws % 3 == 0:
            try:
                ns.expire(max(0, ns.steps().stop - 4))
                cleaner.run_once()
            except DurableWalError as exc:
                if not retry:
                    raise
                emit(f"CLEANERR {type(exc).__name__}: {exc}")
    ns.close()
    emit("DONE")


def main() -> None:
    backend, config, namespace, mode, steps = sys.argv[1:6]
    run(backend, json.loads(config), namespace, mode, int(steps),
        lambda line: print(line, flush=True))


if __name__ == "__main__":
    main()
