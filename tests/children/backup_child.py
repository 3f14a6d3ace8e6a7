"""Child processes for ``tests/cli/test_cli_backup.py``: a writer whose dead entries a
cleaner frees in place, and ``durablewal backup`` held at a failpoint.

Usage (the test sets ``PYTHONPATH`` to the repository root):

* ``writer CONFIG_JSON NAMESPACE``: commits writer steps ``0, 1, ...`` of
  :data:`wal_child.WRITER` with the rows of :func:`wal_child.rows_for` (table ``a`` in
  region 0, ``b`` in region 1), so ``wal_crash_tools.check_namespace`` judges them; each
  step first leaves an abandoned attempt of :data:`BALLAST_BYTES` in region 0, between
  the step's own entries: dead entries several pages long, which a cleaner frees by
  punching holes in the middle of a segment. Prints ``ACK ws step`` (flushed) after each
  commit returns; an attempt a cleaner's bound got to first (``AttemptLost``) prints
  ``LOST ws`` and the writer step is written again. Runs until killed.
* ``backup POINT ARG...``: runs ``durablewal ARG...``; when the run reaches the
  failpoint ``POINT`` (``backup.captured``, ``backup.copied``) it prints ``AT POINT``
  (flushed) and waits there, holding whatever the backup holds at that point, until a
  line arrives on stdin (it then goes on) or it is killed.
"""

from __future__ import annotations

import json
import sys

import pyarrow as pa

import pyspark_durable.wal.failpoints as failpoints
from pyspark_durable.cli import main
from pyspark_durable.errors import AttemptLost
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)
from tests.children.wal_child import WRITER, rows_for

BALLAST_BYTES = 48 << 10  # a dead entry spanning whole file-system blocks: punched


def ballast(ws: int) -> pa.Table:
    return pa.table({"ws": pa.array([ws], pa.int64()),
                     "i": pa.array([0], pa.int64()),
                     "payload": pa.array([f"{ws}-" * (BALLAST_BYTES // 4)], pa.string())})


def writer(config: dict, namespace: str) -> None:
    ns = Namespace(open_store("file", namespace, **config))
    ws = 0
    while True:
        attempt = ns.begin(WRITER, ws)
        try:
            attempt.write("a", rows_for(ws, "a"), region_id=0)
            ns.begin(WRITER, ws).write("a", ballast(ws), region_id=0)  # abandoned
            attempt.write("b", rows_for(ws, "b"), region_id=1)
            step = attempt.commit()
        except AttemptLost:
            print(f"LOST {ws}", flush=True)
            continue
        print(f"ACK {ws} {step}", flush=True)
        ws += 1


def hold_at(point: str) -> None:
    def handler(reached: str) -> None:
        if reached == point:
            print(f"AT {point}", flush=True)
            sys.stdin.readline()  # EOF too: a test that went away lets it finish
    failpoints.install(handler)


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    if role == "writer":
        writer(json.loads(args[0]), args[1])
    elif role == "backup":
        hold_at(args[0])
        raise SystemExit(main(args[1:]))
    else:
        raise SystemExit(f"unknown role {role!r}")
