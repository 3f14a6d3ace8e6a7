"""Child process for ``tests/wal/test_history_bound.py``: one committer of many steps.

Usage: python history_child.py PATH PROCESS STEPS EVERY CHUNK

Commits ``STEPS`` steps into namespace ``race`` of the file log at ``PATH``, alternating
a streaming writer ``pPROCESS-query`` and one-off writers ``pPROCESS-batch-I``, with a
committers' snapshot every ``EVERY`` records and step-index chunks of ``CHUNK`` steps
(the test's small numbers), so racing processes race to write snapshots.
"""

from __future__ import annotations

import sys
import time

import pyarrow as pa

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.replay import snapshot_schedule, step_index
from tests.children import without_pandas  # noqa: F401 - pyarrow finds no pandas to import (see there)


def write(ns: Namespace, writer: str, wstep: int, started_ms: int | None = None) -> int:
    """Commit one one-row step of ``(writer, wstep)``; return its step."""
    a = ns.begin(writer, wstep)
    a.write("t", pa.table({"id": pa.array([wstep], pa.int64())}), region_id=wstep % 2)
    return a.commit(started_ms=started_ms)


def commit_many(path: str, process: int, steps: int) -> None:
    ns = Namespace(open_store("file", "race", path=path))
    for i in range(steps):
        if i % 2:
            write(ns, f"p{process}-batch-{i}", 0, int(time.time() * 1000))
        else:
            write(ns, f"p{process}-query", i // 2)
    ns.close()


if __name__ == "__main__":
    path, process, steps, every, chunk = sys.argv[1:6]
    snapshot_schedule.SNAPSHOT_EVERY_RECORDS = int(every)
    step_index.CHUNK_STEPS = int(chunk)
    commit_many(path, int(process), int(steps))
