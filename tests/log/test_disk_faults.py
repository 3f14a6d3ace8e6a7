"""The file log keeps what it acknowledged when the disk errs: failed fsyncs, power cuts.

Faults are injected at the boundary the code crosses, the fsync(2)/fdatasync(2) calls of
a separate writer process, by a preload shim this test builds with gcc
(tests/faults/syncshim.c); the code under test is not touched. After the writer exits
(or is killed), the files are rebuilt as only their synced writes would have left them
(tests/faults/powercut.py: the failed write's pages dropped, unsynced bytes gone), and a
fresh process opens the WAL.

The rule under test (docs/backends.md, "The fsync rule"): after a failed write or fsync,
no byte of that write is ever acknowledged unless it was written again and synced. So
every acknowledged step reads back exactly, by content, after the cut; nothing a failed
call reported as failed is found committed unless it was retried; and the one case
that cannot be decided (the acknowledgement mark failed twice) is named as such.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.upkeep.check import run_check
from tests.faults.powercut import DurableImage, build_shim, power_cut, shim_env
from tests.wal_crash_tools import check_namespace, run_child, run_writer_here

NS = "faults"
SEGMENT = 16 << 10  # small segments: rolls, sealed segments and deletions happen


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_shim(tmp_path_factory.mktemp("shim"))


def config(root: Path) -> dict:
    return {"path": str(root), "segment_size_bytes": SEGMENT}


def verify(root: Path, acked: dict[int, int], retained_only: bool) -> None:
    """A fresh process's view: every acknowledged step once, by content; check is clean."""
    ns = Namespace(open_store("file", NS, **config(root)))
    try:
        check_namespace(ns, acked, retained_only=retained_only)
        problems = [p.text() for p in run_check(ns.store).problems]
    finally:
        ns.close()
    assert problems == [], problems


# (the call to fail, a substring of the path, the nth matching call, how many in a row,
#  the writer's mode, the typed error the writer must see, or None: the failure was
#  repaired inside the append)
FAILURES = {
    "region frames": ("fdatasync", "/region_0/0", 6, 1, "write", "BackendUnavailable"),
    "commit record": ("fdatasync", "/commits/0", 6, 1, "write", "BackendUnavailable"),
    "ack mark once": ("fdatasync", "/commits/acked", 6, 1, "write", None),
    # the commits log's first three marks are its creation, the `ns` record and the new
    # namespace's policy records (one append): 4, 5 and 6 are the writer's first appends
    **{f"ack mark twice at sync {n}": ("fdatasync", "/commits/acked", n, 2, "write",
                                        "AppendIndeterminate") for n in (4, 5, 6)},
    "region ack mark": ("fdatasync", "/region_1/acked", 4, 2, "write", "AppendIndeterminate"),
    "snapshot": ("fsync", "/snapshots/", 2, 1, "clean", "BackendUnavailable"),
    "low watermark": ("fsync", "low_watermark", 2, 1, "clean", "BackendUnavailable"),
    "folder": ("fsync", "/region_0", 3, 1, "clean", "BackendUnavailable"),
}


@pytest.mark.parametrize("case", sorted(FAILURES))
def test_a_failed_fsync_never_acknowledges_what_it_failed_to_write(shim, tmp_path, case):
    """This tests that when one fsync/fdatasync of a writer process fails with EIO (its
    segment frames, a commit record, the acknowledgement mark once or twice, a snapshot,
    the low watermark, a folder or, when the child abandoned an attempt a pass frees, the
    freed-frames record), the writer gets the typed error (or none, when the append
    repaired it by writing the mark again), retries that writer step once as a user
    would, and that after a power cut that drops everything the disk did not confirm (the
    failed call's pages included) a fresh process finds every acknowledged step exactly
    once, by content, and ``check`` finds nothing wrong; then a writer without faults goes
    on from there."""
    call, where, nth, times, mode, expected = FAILURES[case]
    root, record = tmp_path / "wal", tmp_path / "record"
    root.mkdir()
    image = DurableImage.baseline(shim, root)
    env = shim_env(shim, root, record, fail=f"{call}:{where}:{nth}:{times}")
    lines: list[str] = []
    acks, done = run_child("file", config(root), NS, f"{mode}-retry", 12, None, env=env,
                           out=lines)
    assert done, lines[-5:]
    errors = [ln for ln in lines if ln.startswith(("ERR", "CLEANERR"))]
    if expected is None:
        assert errors == [], errors
    else:
        assert errors, f"the injected {call} failure on {where} was never reported"
        assert all(f" {expected}: " in e or e.startswith(f"CLEANERR {expected}:")
                   for e in errors), errors
        assert all("namespace=faults" in e for e in errors), errors
    acked = dict(acks)
    assert sorted(acked) == list(range(12)), f"a retried writer step was not acknowledged: {lines}"

    stats = power_cut(shim, root, record, image, tmp_path / "after")
    assert stats["events"] > 0
    verify(root, acked, retained_only=mode == "clean")

    more, done = run_writer_here("file", config(root), NS, mode, 16)
    assert done
    acked.update(more)
    verify(root, acked, retained_only=mode == "clean")


@pytest.mark.crash
@pytest.mark.parametrize("mode", ["write", "clean"])
def test_power_cuts_keep_every_acknowledged_step(shim, tmp_path, mode):
    """This tests that a writer (and cleaner) killed by SIGKILL, each kill followed by a
    simulated power cut (unsynced bytes dropped; every other cut keeps a random prefix of
    each file's unsynced appends: torn writes), never loses an acknowledged step and never
    shows one twice: after every cut a fresh process finds each acknowledged writer step
    exactly once, by content, dense sequence numbers, and a clean ``check``; the next
    writer goes on from there. Half the kills land at a random moment, half just before a
    random sync (the shim kills the process there), where unsynced bytes are sure to be
    in flight."""
    root = tmp_path / "wal"
    root.mkdir()
    rng = random.Random(0x5EED)
    acked: dict[int, int] = {}
    totals = {"dropped_bytes": 0, "torn_bytes_kept": 0, "names_lost": 0, "events": 0}
    kills = 8
    for run in range(kills):
        image = DurableImage.baseline(shim, root)
        record = tmp_path / f"record{run}"
        if run % 2:
            env = shim_env(shim, root, record, crash=f"sync:/{NS}/:{rng.randint(10, 150)}")
            kill = None
        else:
            env = shim_env(shim, root, record)
            kill = (rng.randint(2, 8), rng.uniform(0.0, 0.05))
        acks, done = run_child("file", config(root), NS, mode, 400, kill, env=env)
        assert not done and acks, "the writer finished before its kill"
        for ws, step in acks:
            assert acked.setdefault(ws, step) == step, f"ws={ws} acknowledged as two steps"
        stats = power_cut(shim, root, record, image, tmp_path / "after",
                          rng=rng if run % 4 >= 2 else None)
        for k in totals:
            totals[k] += stats[k]
        verify(root, acked, retained_only=mode == "clean")
    assert totals["dropped_bytes"] + totals["names_lost"] > 0, f"no cut dropped anything: {totals}"
    print(f"\n{kills} power cuts ({mode}): {len(acked)} acknowledged steps kept; {totals}")
