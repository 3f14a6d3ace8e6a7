"""Write the future-version fixtures: WALs as a newer release would write them.

Each fixture is written by today's code with one format version bumped past the newest
this release reads, so every other byte (frame CRCs, entry digests, the snapshot's CRC)
is consistent, as a real newer release's would be::

    PYTHONPATH=. python tests/golden/make_future.py tests/golden

``future-<element>/manifest.json`` names the element and both versions the refusal must
name. Run it in its own process: it patches the format constants of the modules it loads.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pyarrow as pa

from pyspark_durable.codec import keys, payload
from pyspark_durable.log import open_store
from pyspark_durable.log.file.store import RESERVE_FILE
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.format import runs, snapshot_file
from pyspark_durable.wal.replay import stored_state

NAMESPACE = "golden"

# element -> (what to patch, the version found, the newest read today)
BUMPS = {
    "key": (lambda: setattr(keys, "KEY_VERSION", 1), 1, 0),
    "value": (lambda: _value_version(7), 7, 0),
    "snapshot": (lambda: setattr(stored_state, "SNAPSHOT_VERSION", 7), 7, 6),
    "envelope": (lambda: setattr(snapshot_file, "SNAPSHOT_MAGIC", b"DWS4"), "DWS4", "DWS3"),
    "runs": (lambda: setattr(runs, "RUNS_FORMAT", 2), 2, 1),
}
ELEMENT_NAMES = {"key": "key", "value": "value", "snapshot": "snapshot format",
                 "envelope": "snapshot envelope", "runs": "compact runs format"}


def _value_version(v: int) -> None:
    keys.VALUE_PREFIX = payload.VALUE_PREFIX = bytes((v,))


def rows(table: str, step: int) -> pa.Table:
    return pa.table({"id": pa.array([step * 10 + i for i in range(2)], pa.int64()),
                     "v": pa.array([f"{table}{step}-{i}" for i in range(2)])})


def write(root: Path) -> None:
    ns = Namespace(open_store("file", NAMESPACE, path=str(root), segment_size_bytes=1024))
    for step in range(4):
        attempt = ns.begin("writer-1", step)
        # four runs (two tables in two regions): a step's runs are then stored compactly
        for region in (0, 1):
            attempt.write("a", rows("a", step), region_id=region)
            attempt.write("b", rows("b", step), region_id=region)
        attempt.commit()
        if step == 2:
            ns.commit_reader("reader-1", 1)
            Cleaner(ns, grace_ms=0).run_once()  # a snapshot; step 3 is replayed after it
    ns.close()
    # room kept for a full disk (16 KiB or more) holds no data: not committed
    (root / NAMESPACE / RESERVE_FILE).unlink()


def main(out: Path, element: str) -> None:
    patch, found, newest = BUMPS[element]
    patch()
    folder = out / f"future-{element}"
    shutil.rmtree(folder, ignore_errors=True)
    write(folder / "wal")
    (folder / "manifest.json").write_text(json.dumps(
        {"namespace": NAMESPACE, "element": ELEMENT_NAMES[element], "found": found,
         "newest": newest}, indent=1) + "\n")


if __name__ == "__main__":
    if len(sys.argv) == 2:  # one process per element: each patches other constants
        import subprocess
        for name in BUMPS:
            subprocess.run([sys.executable, __file__, sys.argv[1], name], check=True)
    else:
        main(Path(sys.argv[1]), sys.argv[2])
