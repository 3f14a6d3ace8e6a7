"""Write one golden WAL with the code of an older commit (tests/golden/README.md).

Run with that commit's package first on the path, never this worktree's::

    git worktree add --detach /tmp/golden-build-SHA SHA
    PYTHONPATH=/tmp/golden-build-SHA python tests/golden/build_golden.py OUT SHA

It uses only calls every release since the WAL layer has (``Namespace``, ``begin``,
``Attempt.write``/``commit``, ``expire``, ``Cleaner``, ``read_steps``), plus, where the
release has them, ``commit_reader``, tables spanning regions (each step then writes both
tables in both regions: four runs, stored compactly from commit 2f1ab25 on) and
``define_tables`` (both tables in one ``tables`` record). ``OUT/manifest.json`` records
what the old code itself read back after its clean: the test compares today's read to it.
"""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path

import pyarrow as pa

import pyspark_durable
from pyspark_durable.endpoint.api import read_steps
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace

NAMESPACE = "golden"
STEPS = 5
EXPIRE_BEFORE = 2
READER = ("reader-1", 3)
COLUMNS = ("id", "v", "_region", "_sequence", "_step")  # compared; other metadata differs


def rows(table: str, step: int, region: int) -> pa.Table:
    return pa.table({"id": pa.array([step * 10 + region * 5 + i for i in range(2)], pa.int64()),
                     "v": pa.array([f"{table}{step}-{region}-{i}" for i in range(2)])})


def read_back(ns: Namespace) -> dict[str, list[dict]]:
    out = {}
    for table in ("a", "b"):
        t = read_steps(ns, table, with_metadata=True)
        out[table] = [{c: r[c] for c in COLUMNS} for r in t.to_pylist()]
    return out


def main(out: Path, commit: str) -> None:
    assert not str(Path(pyspark_durable.__file__)).startswith("/work/wt-compat"), \
        "run with the old commit's package first on PYTHONPATH"
    root = out / "wal"
    # small segments, so a clean deletes whole segments and moves low watermarks
    store = open_store("file", NAMESPACE, path=str(root), segment_size_bytes=1024)
    ns = Namespace(store)
    # tables span regions from commit a167257 on (mark_deleted takes a region since)
    # the table calls live on the namespace until the table catalog (``ns.tables``)
    catalog = ns if hasattr(ns, "mark_deleted") else ns.tables
    span = "region_id" in inspect.signature(catalog.mark_deleted).parameters
    places = [("a", 0), ("b", 1)] + ([("a", 1), ("b", 0)] if span else [])
    define_many = getattr(catalog, "define_tables", None) or getattr(catalog, "define_many", None)
    if define_many is not None:
        define_many([(t, rows(t, 0, 0).schema) for t in ("a", "b")])
    for step in range(STEPS):
        attempt = ns.begin("writer-1", step)
        for table, region in places:
            attempt.write(table, rows(table, step, region), region_id=region)
        attempt.commit()
    if hasattr(ns, "commit_reader"):
        ns.commit_reader(*READER)
    ns.expire(EXPIRE_BEFORE)
    Cleaner(ns, grace_ms=0).run_once()
    ns.close()
    ns = Namespace(open_store("file", NAMESPACE, path=str(root), segment_size_bytes=1024))
    manifest = {
        "commit": commit, "namespace": NAMESPACE,
        "steps": [ns.steps().start, ns.steps().stop],
        "reader": list(READER) if hasattr(ns, "commit_reader") else None,
        "rows": read_back(ns),
    }
    ns.close()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(json.dumps(manifest)[:300])


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
