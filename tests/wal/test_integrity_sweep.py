"""Bit flips and truncations in every file a small WAL has: nothing silent, nothing untyped.

A WAL with two regions, three tables, several segments per region, a clean (so
snapshots, low watermarks and a killed attempt's freed frames exist), a reader
position and steps after the clean is built once. Then, for every file, bytes are
flipped (a sample across the file, every byte of its head and tail, where headers and
the newest frames live) and the file is cut at several lengths; each mutation is
applied to a fresh copy, then the WAL is read through the Python API and verified
with ``durablewal check``. Rules:

* a read either returns exactly what it returned before the damage, or raises a typed
  error (``DurableWalError``): never different rows, steps or positions in silence;
* ``check`` never raises, and flags every mutation that made a read fail or differ;
* damage that a read survived (a redundant copy, a repaired file) is counted as
  repaired when ``check`` still names it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import DurableWalError
from pyspark_durable.log import open_store
from pyspark_durable.log.file.store import RESERVE_FILE
from pyspark_durable.wal import Cleaner
from pyspark_durable.wal.upkeep.check import Checker
from tests.helpers import log_clock

NS = "sweep"
# every byte of a file's head is flipped: a whole mark file, or a segment's first frame
# head and body head (8 + 20 bytes); the last bytes are where a torn write ends
HEAD_BYTES, TAIL_BYTES = 28, 8
SAMPLES = 16  # plus this many bytes spread over the rest (past the head: its CRC's domain)
CUTS = 4  # truncation points per file (plus zero length and one byte short)
SHARDS = 3  # tests the sweep is cut into: pytest-xdist spreads them over the cores


def build(root: Path) -> None:
    config = {"backend": "file", "namespace": NS,
              "options": {"path": str(root), "segment_size_bytes": 2048}}
    ns = open_namespace(config)
    for ws in range(8):
        with log_clock(-60 if ws <= 4 else 0):  # the dead attempt is older than what follows
            write_step(ns, "w", ws, {"orders": [{"id": ws * 10 + i, "amount": float(i)}
                                                for i in range(ws % 3 + 1)],
                                     "items": [{"sku": f"s{ws}", "n": ws}]})
            if ws % 2:
                write_step(ns, "e", ws, {"events": [{"id": ws, "kind": "tick"}]}, region_id=1)
            if ws == 4:  # a killed attempt between needed steps: freed in place (`freed`)
                dead = ns.begin("dead", 0)
                dead.write("orders", pa.table({"id": [999] * 300, "amount": [0.5] * 300}))
                dead.receipt()
    ns.commit_reader("dash", 3)
    ns.expire(4)
    Cleaner(ns, grace_ms=0).run_once()
    ns.expire(6)
    Cleaner(ns, grace_ms=0).run_once()
    for ws in range(8, 11):
        write_step(ns, "w", ws, {"orders": [{"id": ws * 10, "amount": 1.0}]})
    ns.commit_reader("dash", 9)
    ns.close()


def view(root: Path) -> tuple:
    """Everything a reader can see: steps, rows of every table with metadata, readers."""
    config = {"backend": "file", "namespace": NS, "options": {"path": str(root)}}
    ns = open_namespace(config)
    try:
        tables = {name: read_steps(ns, name).to_pylist() for name in ("orders", "items",
                                                                       "events")}
        ns.refresh()
        readers = {r: p.next_step for r, p in ns.info.readers().items()}
        return (ns.steps(), tables, readers, ns.info.incarnation)
    finally:
        ns.close()


def mutations(path: Path) -> list[tuple[str, int]]:
    size = path.stat().st_size
    if size == 0:
        return []
    spread = {size * i // SAMPLES for i in range(SAMPLES)}
    flips = sorted(set(range(min(size, HEAD_BYTES)))
                   | set(range(max(0, size - TAIL_BYTES), size)) | spread)
    cuts = sorted({0, size - 1} | {size * i // (CUTS + 1) for i in range(1, CUTS + 1)})
    return [("flip", at) for at in flips] + [("cut", at) for at in cuts if at < size]


def apply(path: Path, kind: str, at: int) -> None:
    data = bytearray(path.read_bytes())
    if kind == "flip":
        data[at] ^= 0x10
    else:
        del data[at:]
    path.write_bytes(bytes(data))


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    """Where each mutated copy lives: in memory (/dev/shm) when the machine has it.

    The sweep judges detection, not durability, and copies the WAL over a thousand
    times: on a journalled disk the folder creation and removal dominate its time.
    """
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path / "scratch"
        return
    folder = Path(tempfile.mkdtemp(prefix="sweep-", dir=shm))
    try:
        yield folder / "scratch"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, tuple, list[Path]]:
    """The WAL every mutation starts from, built once for the shards: (its folder, what a
    reader sees in it, its files)."""
    pristine = tmp_path_factory.mktemp("sweep") / "pristine"
    build(pristine)
    baseline = view(pristine)
    assert baseline[0] == range(6, 15) and baseline[2] == {"dash": 9}
    # the reserve holds no data and nothing reads it: it is neither mutated nor copied
    # (1 MiB per copy would make the sweep mostly copying)
    (pristine / NS / RESERVE_FILE).unlink()
    files = sorted(p for p in pristine.rglob("*") if p.is_file())
    kinds = {p.relative_to(pristine).parts[1] for p in files}
    assert {"commits", "region_0", "region_1", "snapshots"} <= kinds, kinds
    names = {p.name for p in files}
    assert {"acked", "low_watermark", "freed"} <= names and \
        any(n.startswith("wal.") for n in names)
    return pristine, baseline, files


@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_flip_and_cut_in_every_file_is_detected_or_harmless(pristine, scratch, shard):
    """This tests that each single flipped byte or truncation, in every file the WAL
    writes, leaves reads exactly as they were or makes them fail with a typed error,
    that `check` never crashes and flags every mutation that changed or failed a read,
    and reports the counts of mutations tried, detected and repaired (each shard tries
    every SHARDS-th mutation of the sweep, so the shards together try them all)."""
    pristine, baseline, files = pristine
    plan = [(original.relative_to(pristine), kind, at)
            for original in files for kind, at in mutations(original)]
    assert len(plan) > 600
    counts: Counter = Counter()
    failures: list[str] = []
    for rel, kind, at in plan[shard::SHARDS]:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(pristine, scratch)
        apply(scratch / rel, kind, at)
        label = f"{kind} {rel} byte {at}"
        counts["tried"] += 1
        try:
            outcome = "same" if view(scratch) == baseline else "changed"
        except DurableWalError:
            outcome = "error"
        except Exception as exc:  # noqa: BLE001 - an untyped error is what we look for
            failures.append(f"{label}: untyped {type(exc).__name__}: {exc}")
            continue
        try:
            problems = Checker(open_store("file", NS, path=str(scratch))).run().problems
        except Exception as exc:  # noqa: BLE001 - check must never raise
            failures.append(f"{label}: check raised {type(exc).__name__}: {exc}")
            continue
        if outcome == "changed":
            failures.append(f"{label}: a read silently returned something else"
                            + ("" if problems else " and check said OK"))
        elif outcome == "error" and not problems:
            failures.append(f"{label}: the read failed but check said OK")
        counts["detected" if outcome == "error" else
               "repaired" if problems else "harmless"] += 1
    print(f"\nintegrity sweep shard {shard + 1}/{SHARDS} over {len(files)} files: {dict(counts)}")
    assert not failures, f"{len(failures)} of {counts['tried']}:\n" + "\n".join(failures[:40])
    assert counts["tried"] == len(plan[shard::SHARDS])
