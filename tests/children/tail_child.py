"""Child processes for ``tests/log/kafka/test_kafka_tailing.py``: writers and a tailing reader.

Usage: ``python tail_child.py ROLE BACKEND CONFIG_JSON NAMESPACE ARGS...`` (the test sets
``PYTHONPATH`` to the repository root). Lines are printed and flushed
as soon as what they report is done.

Roles:

* ``writer WRITER_ID DURATION_S``: commits writer steps ``0, 1, ...`` of ``WRITER_ID``
  back to back for ``DURATION_S`` seconds, each one attempt writing table ``a``
  (region 0) and table ``b`` (region 1) with :func:`stress_child.rows_for`, sometimes
  beside an abandoned attempt (foreign entries between committed runs). Prints
  ``ACK WRITER_ID ws step`` after each commit returns, then ``DONE``.
* ``reader``: follows the namespace from step 0 as a tailing reader does (``steps()``,
  then every new step) and checks each step's rows by content
  (:func:`stress_child.read_one`; a mismatch prints ``BAD ...`` and exits 3). Prints
  ``READ step ...`` per step, and ``ERR step Type: message`` for every typed error a
  read of a committed step raised (then reads the step again). It stops once it has
  read the number of steps the parent writes on its stdin (when the writers are
  done), then prints ``DONE``.
"""

from __future__ import annotations

import random
import select
import sys
import time

from pyspark_durable.errors import DurableWalError
from pyspark_durable.wal import Namespace
from tests.children.stress_child import ABANDON_PROBABILITY, TABLES, open_namespace, read_one, rows_for, say

ENTRY_MAX_BYTES = 1024  # a few entries per table and step: runs of several entries
WAIT_S = 0.02  # the reader's wait for new steps, on its stdin (the parent's "total")
MAX_ERRORS = 50  # a reader that keeps failing stops: the test reports what it saw


def writer(ns: Namespace, writer_id: str, duration_s: float) -> None:
    rng = random.Random()
    deadline = time.monotonic() + duration_s
    ws = 0
    while time.monotonic() < deadline:
        attempt = ns.begin(writer_id, ws)
        for table, region in TABLES.items():
            attempt.write(table, rows_for(writer_id, ws, table), region_id=region)
            if rng.random() < ABANDON_PROBABILITY / len(TABLES):
                ns.begin(writer_id, ws).write(
                    table, rows_for(writer_id, ws + 1_000_000, table), region_id=region)
        say(f"ACK {writer_id} {ws} {attempt.commit()}")
        ws += 1
    say("DONE")


def reader(ns: Namespace) -> None:
    total: int | None = None
    next_step = errors = 0
    while total is None or next_step < total:
        if total is None:
            ready, _, _ = select.select([sys.stdin], [], [], WAIT_S)
            if ready:
                total = int(sys.stdin.readline())
        stop = ns.steps().stop
        while next_step < stop:
            try:
                fields = read_one(ns, next_step)
            except DurableWalError as exc:
                say(f"ERR {next_step} {type(exc).__name__}: {' '.join(str(exc).split())}")
                errors += 1
                if errors >= MAX_ERRORS:
                    sys.exit(4)
                continue  # the step is committed: read it again
            say(f"READ {next_step} {fields}")
            next_step += 1
    say("DONE")


def main() -> None:
    role, backend, config, namespace, *args = sys.argv[1:]
    if role == "writer":
        writer(open_namespace(backend, config, namespace, entry_max_bytes=ENTRY_MAX_BYTES),
               args[0], float(args[1]))
    elif role == "reader":
        reader(open_namespace(backend, config, namespace))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
