"""Child processes for ``tests/wal/test_retention_stress.py``: writers, a reader, cleaners.

Usage: ``python stress_child.py ROLE BACKEND CONFIG_JSON NAMESPACE ARGS...`` (the test
sets ``PYTHONPATH`` to the repository root). Every line below is printed and flushed
as soon as what it reports is done, so the parent can count on it after a SIGKILL.

Roles:

* ``writer WRITER_ID N READER_ID``: commits writer steps ``0..N-1`` of ``WRITER_ID``, each one
  attempt writing table ``a`` (region 0) and table ``b`` (region 1); sometimes also
  leaves an abandoned attempt behind, and sometimes pauses before it commits (a slow
  task: cleaners may then record a bound above its entries). Before each writer step
  it waits while reader ``READER_ID`` lags too far behind. On restart it redoes its highest committed
  writer step (the recommit is a no-op returning the same step). Prints
  ``ACK WRITER_ID ws step`` after each commit returns, ``LOST ws`` when a cleaner got
  to an attempt's entries first (the writer step is then written again), ``DONE``.
* ``reader READER_ID TOTAL_STEPS``: from its recorded position, reads every step,
  checks its rows against :func:`rows_for`, prints
  ``READ step writer ws table:first_seq:entries ...``, records its position and
  expires what it read; ``DONE`` once ``TOTAL_STEPS`` steps were read. A mismatch
  prints ``BAD ...`` and exits with status 3.
* ``cleaner STOP_FLAG``: runs ``Cleaner(ns, grace_ms=0)`` passes back to back,
  printing ``PASS n freed commits_low`` after each, until the file ``STOP_FLAG``
  exists; then ``DONE``.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

import pyarrow as pa

from pyspark_durable.errors import AttemptLost
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)

TABLES = {"a": 0, "b": 1}  # table name -> its region
ENTRY_MAX_BYTES = 1024  # writers split each table's rows into a few entries
ABANDON_PROBABILITY = 0.2
SLOW_COMMIT_PROBABILITY = 0.3  # a slow task: time passes between its writes and commit
SLOW_COMMIT_S = {"file": 0.1, "kafka": 0.5}  # at most; meanwhile the reader may catch up
# and a cleaner pass by (Kafka's passes take longer)
POLL_S = 0.02  # a child's pause while it waits for the log to move
MAX_READER_LAG = 2  # writers wait while the reader is further behind (so it catches up)


def rows_for(writer_id: str, writer_step: int, table: str) -> pa.Table:
    """Deterministic rows of one writer step of one table (table ``a`` may be empty)."""
    salt = sum(writer_id.encode())
    n = (writer_step * 7919 + salt) % 37 + (0 if table == "a" else 3)
    return pa.table({
        "w": pa.array([writer_id] * n, pa.string()),
        "ws": pa.array([writer_step] * n, pa.int64()),
        "i": pa.array(range(n), pa.int64()),
        "payload": pa.array([f"{table}-{writer_id}-{writer_step}-{i}-" + "x" * (i % 50)
                             for i in range(n)], pa.string()),
    })


def open_namespace(backend: str, config: str, namespace: str, **kwargs) -> Namespace:
    return Namespace(open_store(backend, namespace, **json.loads(config)), **kwargs)


def say(line: str) -> None:
    print(line, flush=True)


def wait_for_reader(ns: Namespace, reader_id: str) -> None:
    """Back-pressure: wait while the reader lags more than MAX_READER_LAG steps behind.

    The reader is slower than two writers; without this it would lag by hundreds of
    steps, no cleaner could ever record a bound above an attempt in flight, and the
    race that makes a commit :class:`AttemptLost` would never be run.
    """
    while True:
        end = ns.steps().stop  # steps() refreshes
        position = ns.info.reader_position(reader_id)
        if end - (position.next_step if position else 0) <= MAX_READER_LAG:
            return
        time.sleep(POLL_S)


def writer(ns: Namespace, writer_id: str, n: int, reader_id: str, slow_s: float) -> None:
    rng = random.Random()
    ns.refresh()
    start = ns.info.newest_committed_writer_step(writer_id) or 0  # redo the last one: a no-op commit
    for ws in range(start, n):
        wait_for_reader(ns, reader_id)
        while True:
            attempt = ns.begin(writer_id, ws)
            for table, region in TABLES.items():
                attempt.write(table, rows_for(writer_id, ws, table), region_id=region)
                if rng.random() < ABANDON_PROBABILITY / len(TABLES):
                    # an abandoned attempt of the same writer step: never committed
                    ns.begin(writer_id, ws).write(
                        table, rows_for(writer_id, ws + 1_000_000, table), region_id=region)
            if rng.random() < SLOW_COMMIT_PROBABILITY:
                time.sleep(rng.uniform(0.0, slow_s))  # a slow task, not a wait
            try:
                step = attempt.commit()
            except AttemptLost:
                say(f"LOST {ws}")
                continue
            say(f"ACK {writer_id} {ws} {step}")
            break
    say("DONE")


def bad(message: str) -> None:
    say(f"BAD {message}")
    sys.exit(3)


def read_one(ns: Namespace, step: int) -> str:
    """Read and verify one step; the ``READ`` line's fields after the step number."""
    commit = ns.step_commit(step)
    got: dict[str, list[pa.RecordBatch]] = {}
    seqs: dict[str, list[int]] = {}
    for sb in ns.read_step(step):
        name = ns.tables.by_id(refresh=False)[sb.table_id].name
        if sb.step != step or TABLES.get(name) != sb.region_id:
            bad(f"step {step}: entry of table {name} in region {sb.region_id} for step {sb.step}")
        got.setdefault(name, []).extend(sb.batches)
        seqs.setdefault(name, []).append(sb.sequence_num)
    fields = [commit.writer_id, str(commit.writer_step)]
    for table in TABLES:
        expect = rows_for(commit.writer_id, commit.writer_step, table)
        if expect.num_rows == 0:
            if table in got:
                bad(f"step {step}: table {table} has rows, expected none")
            continue
        if table not in got:
            bad(f"step {step}: table {table} has no rows, expected {expect.num_rows}")
        rows = pa.Table.from_batches(got[table], schema=expect.schema)
        if not rows.equals(expect):
            bad(f"step {step} ({commit.writer_id}, {commit.writer_step}) table {table}: "
                f"{rows.num_rows} rows differ from the {expect.num_rows} expected")
        first = seqs[table][0]
        if seqs[table] != list(range(first, first + len(seqs[table]))):
            bad(f"step {step} table {table}: sequence numbers {seqs[table]} are not dense")
        fields.append(f"{table}:{first}:{len(seqs[table])}")
    return " ".join(fields)


def reader(ns: Namespace, reader_id: str, total: int) -> None:
    ns.refresh()
    position = ns.info.reader_position(reader_id)
    next_step = position.next_step if position else 0
    ns.expire(next_step)  # a kill may have come between recording the position and expiring
    while next_step < total:
        steps = ns.steps()
        if steps.start > next_step:
            bad(f"steps from {steps.start} on are retained, the reader needs {next_step}")
        if next_step >= steps.stop:
            time.sleep(POLL_S)  # a child polling the log for new steps
            continue
        for step in range(next_step, min(steps.stop, total)):
            say(f"READ {step} {read_one(ns, step)}")
            ns.commit_reader(reader_id, step + 1)
            ns.expire(step + 1)
            next_step = step + 1
    say("DONE")


def cleaner(ns: Namespace, stop_flag: str) -> None:
    clean = Cleaner(ns, grace_ms=0)
    passes = 0
    while not os.path.exists(stop_flag):
        report = clean.run_once()
        passes += 1
        say(f"PASS {passes} {report.freed_entries} {report.commits_low[1]}")
    say("DONE")


def main() -> None:
    role, backend, config, namespace, *args = sys.argv[1:]
    if role == "writer":
        writer(open_namespace(backend, config, namespace, entry_max_bytes=ENTRY_MAX_BYTES),
               args[0], int(args[1]), args[2], SLOW_COMMIT_S.get(backend, 0.1))
    elif role == "reader":
        reader(open_namespace(backend, config, namespace), args[0], int(args[1]))
    elif role == "cleaner":
        cleaner(open_namespace(backend, config, namespace), args[0])
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
