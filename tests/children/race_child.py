"""Child process for the race tests: one committer or cleaner that pauses at a named point.

Usage: python race_child.py ROLE BACKEND CONFIG_JSON NAMESPACE PAUSE_AT [WRITER WS]

ROLE ``commit`` writes rows of ``(WRITER, WS)`` into two regions and commits them;
ROLE ``clean`` runs one cleaner pass with grace 0. At the failpoint ``PAUSE_AT``
(see :mod:`pyspark_durable.wal.failpoints`; ``written`` is the moment between an
attempt's acknowledged writes and its commit) the child prints ``PAUSED <point>`` and blocks
until the test writes a line to its stdin, so the test can act in between.
A committer that gets ``AttemptLost`` prints ``LOST`` and writes the step again.
"""

from __future__ import annotations

import json
import sys

from pyspark_durable.errors import AttemptLost
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace, failpoints
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)


def rows_for(writer: str, ws: int, table: str):
    import pyarrow as pa

    n = 3 + (ws * 5 + len(writer)) % 7
    return pa.table({"id": pa.array(range(n), pa.int64()),
                     "tag": pa.array([f"{writer}/{ws}/{table}/{i}" for i in range(n)])})


def pause(point: str) -> None:
    print("PAUSED", point, flush=True)
    if not sys.stdin.readline():
        raise SystemExit("the test went away")


def main() -> None:
    role, backend, config, namespace, pause_at = sys.argv[1:6]
    ns = Namespace(open_store(backend, namespace, **json.loads(config)))
    failpoints.install(lambda point: pause(point) if point == pause_at else None)
    if role == "clean":
        report = Cleaner(ns, grace_ms=0).run_once()
        print("CLEANED", report.snapshot_at, flush=True)
        return
    writer, ws = sys.argv[6], int(sys.argv[7])
    while True:
        attempt = ns.begin(writer, ws)
        attempt.write("a", rows_for(writer, ws, "a"), region_id=0)
        attempt.write("b", rows_for(writer, ws, "b"), region_id=1)
        if pause_at == "written":
            attempt.receipt()  # writes are asynchronous: pause once they are on the log
            pause("written")
        try:
            print("ACK", attempt.commit(), flush=True)
            return
        except AttemptLost as exc:
            print("LOST", exc, flush=True)
            failpoints.install(None)  # the retry runs straight through
            pause_at = ""


if __name__ == "__main__":
    main()
