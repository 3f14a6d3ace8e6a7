"""``check`` beside a running cleaner: entries a cleaner released while the check ran are
not damage, and entries deleted without a record still are.

The rule that makes it safe: a cleaner records an expiry (and the region's clean bound)
in the commits log before it deletes or frees anything. So a check that finds a step's
entries gone asks the commits log as it is now: a step no longer needed was released
by a cleaner (nothing to check); a step still needed lost them. The interleavings are
forced at the check's failpoints, with a cleaner pass run in between."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import pyspark_durable.wal.failpoints as failpoints
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace, RetentionPolicy
from pyspark_durable.wal.upkeep.check import run_check
from pyspark_durable.wal.upkeep.cleaner import Cleaner

NS = "shop"
SEGMENT_BYTES = 16 << 10  # a few steps per region segment: a pass deletes whole files


def config(root: Path) -> dict:
    return {"path": str(root), "segment_size_bytes": SEGMENT_BYTES}


def write(ns: Namespace, first: int, count: int) -> None:
    for ws in range(first, first + count):
        attempt = ns.begin("loader", ws)
        attempt.write("orders", pa.table({"id": list(range(ws * 100, ws * 100 + 100)),
                                          "pad": ["x" * 40] * 100}))
        ns.commit("loader", ws, [attempt.receipt()])


@pytest.fixture
def wal(tmp_path: Path):
    ns = Namespace(open_store("file", NS, **config(tmp_path / "wal")))
    write(ns, 0, 30)
    yield tmp_path / "wal", ns
    failpoints.install(None)
    ns.close()


def at(point: str, act):
    """Run ``act`` once, when the check reaches ``point``."""
    done = []

    def handler(reached: str) -> None:
        if reached == point and not done:
            done.append(point)
            act()

    failpoints.install(handler)
    return done


@pytest.mark.parametrize("point", ["check.commits_read", "check.region_opening",
                                   "check.region_reading"])
def test_entries_a_cleaner_released_during_the_check_are_not_damage(wal, point):
    """This tests that a check paused after reading the commits log, after reading a
    region's bounds (its read not opened yet), or in the middle of a region's read,
    while a cleaner expires 20 of 30 steps and deletes their segments, reports nothing:
    those steps were released, not lost; the 10 kept still read whole."""
    root, ns = wal

    def clean() -> None:
        ns.set_retention(RetentionPolicy(max_steps=10))
        report = Cleaner(ns, grace_ms=0).run_once()
        before, after = report.regions[0]
        assert after > before, report  # segments really went from under the check

    done = at(point, clean)
    store = open_store("file", NS, **config(root))
    report = run_check(store)
    assert done == [point]
    assert [p.text() for p in report.problems] == []
    assert report.steps >= 10


def test_entries_deleted_without_a_record_during_the_check_are_still_lost(wal):
    """This tests the other side of the rule: a region segment deleted by hand (no expiry
    recorded) while the check is paused is named, with the steps that lost entries."""
    root, _ = wal
    segments = sorted((root / NS / "region_0").glob("*.seg"))
    assert len(segments) > 2, segments
    done = at("check.commits_read", lambda: segments[0].unlink())
    store = open_store("file", NS, **config(root))
    report = run_check(store)
    assert done == ["check.commits_read"]
    texts = [p.text() for p in report.problems]
    assert any("step 0 needs entries" in t or "region log" in t or "step 0" in t
               for t in texts), texts
