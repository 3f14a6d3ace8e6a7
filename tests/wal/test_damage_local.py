"""One damaged frame in a region segment loses only the steps that refer to it.

The rule (log/file/segments.py): a bad frame below the acknowledged end is damage, and it
stays local. The file log indexes its offsets as damaged and resumes at the next valid
frame; the WAL reads around a damaged entry that no step of the read refers to, and a
step whose run holds one fails with a typed error naming that step. ``check`` names the
lost steps. Everything else in the segment, before and after the damage, still reads.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import CorruptEntryError
from pyspark_durable.log.file.frames import FRAME_HEAD
from pyspark_durable.wal.upkeep.check import run_check
from tests.helpers import frame_spans

NS = "shop"
STEPS = 7


def rows(step: int) -> list[dict]:
    return [{"id": step * 100 + i, "note": f"step {step} row {i}"} for i in range(3)]


def flip_body(segment: Path, span: tuple[int, int]) -> None:
    data = bytearray(segment.read_bytes())
    data[(span[0] + FRAME_HEAD.size + span[1]) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))


@pytest.fixture
def wal(tmp_path: Path) -> tuple[dict, dict[int, range], int]:
    """A WAL of STEPS steps in one region segment, and an uncommitted attempt's entry
    between steps 2 and 3: (config, each step's offsets, the foreign entry's offset)."""
    config = {"backend": "file", "namespace": NS, "options": {"path": str(tmp_path)}}
    ns = open_namespace(config)
    try:
        for s in range(STEPS):
            write_step(ns, "w", s, {"orders": rows(s)})
            if s == 2:
                attempt = ns.begin("aborted", 0)
                attempt.write("orders", pa.Table.from_pylist([{"id": -1, "note": "never"}]))
                attempt.receipt()
        offsets = {}
        for s in ns.steps():
            (run,) = ns.step_commit(s).runs
            offsets[s] = range(run.start, run.end)
    finally:
        ns.close()
    foreign = offsets[3].start - 1
    assert foreign == offsets[2].stop, "the aborted attempt's entry is not between 2 and 3"
    return config, offsets, foreign


def test_a_damaged_entry_loses_only_the_step_that_refers_to_it(wal):
    """This tests that a flipped byte in step 3's entry makes only step 3 unreadable:
    every other step of the same segment (before and after the damage) reads back its
    rows by content, a read of step 3, alone or within a range, is a CorruptEntryError
    naming step 3 and the offset, and ``check`` names step 3 as lost and no other step."""
    config, offsets, _ = wal
    (segment,) = sorted((Path(config["options"]["path"]) / NS / "region_0").glob("*.seg"))
    flip_body(segment, frame_spans(segment)[offsets[3].start])
    ns = open_namespace(config)
    try:
        for s in range(STEPS):
            if s == 3:
                continue
            got = read_steps(ns, "orders", s, s + 1, with_metadata=False).to_pylist()
            assert got == rows(s), s
        for start, end in ((3, 4), (0, STEPS)):
            with pytest.raises(CorruptEntryError) as err:
                read_steps(ns, "orders", start, end)
            assert err.value.where["step"] == 3
            assert err.value.where["offset"] == offsets[3].start
            assert f"step 3 cannot be read: its entry at offset {offsets[3].start}" in str(err.value)
        report = run_check(ns.store)
    finally:
        ns.close()
    lost = [p for p in report.problems if "is lost" in p.message]
    assert [p.where.get("step") for p in lost] == [3], report.problems
    assert not [p for p in report.problems if p.where.get("step") not in (None, 3)]


def test_a_damaged_entry_no_step_refers_to_hurts_no_step(wal):
    """This tests that damage to an uncommitted attempt's entry, which lies between two
    committed steps' runs (a read of steps 0-6 passes over it), makes no step unreadable:
    the range reads back every step's rows in order."""
    config, _, foreign = wal
    (segment,) = sorted((Path(config["options"]["path"]) / NS / "region_0").glob("*.seg"))
    flip_body(segment, frame_spans(segment)[foreign])
    ns = open_namespace(config)
    try:
        got = read_steps(ns, "orders", 0, STEPS, with_metadata=False).to_pylist()
    finally:
        ns.close()
    assert got == [r for s in range(STEPS) for r in rows(s)]
