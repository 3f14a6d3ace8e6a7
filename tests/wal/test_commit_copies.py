"""A flipped byte in the commits log costs no step: each record is written twice.

On the file backend (``record_copies`` 2) the WAL appends each commits-log record as an
original (key ``r``) and its copy (key ``c``) in one append. Replay, a snapshot's chunk
read back, and ``check`` read a damaged entry's record from its other copy; only a record
whose copies are both damaged is lost, a typed error naming its offset, and nothing after
it is renumbered. These tests flip real bytes of real segment files and judge by the rows
read back, not by offsets alone.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.errors import CorruptEntryError
from pyspark_durable.log import Entry, Log, Record, open_store
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.format.records import StepCommit, decode_record, encode_meta
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME, open_snapshot
from pyspark_durable.wal.replay.copies import COPY, ORIGINAL, CommitsReader, Lost, Saved
from pyspark_durable.wal.upkeep.check import run_check
from tests.helpers import frame_spans

NS = "copies"
STEPS = 20
DAMAGED_STEP = 10  # the step whose record is flipped


def config(root: Path) -> dict:
    return {"backend": "file", "namespace": NS, "options": {"path": str(root)}}


def expected(steps: int = STEPS) -> list[tuple[int, int, str]]:
    return [(s, s, f"row {s}") for s in range(steps)]


def view(root: Path) -> list[tuple[int, int, str]]:
    """Every step's rows as (step, id, note): the content, with the numbers it has (one
    pass over the region, as a Spark task reads it: the sweep opens the WAL 1,000 times)."""
    ns = open_namespace(config(root), create=False)
    try:
        found = [(sb.step, row["id"], row["note"])
                 for sb in ns.read_region_steps(0, ns.steps())
                 for batch in sb.batches for row in batch.to_pylist()]
        assert ns.steps() == range(len(found))
        return found
    finally:
        ns.close()


def flip(path: Path, at: int) -> None:
    """Flip every bit of one byte in place (again: restored)."""
    fd = os.open(path, os.O_RDWR)
    try:
        byte = os.pread(fd, 1, at)
        os.pwrite(fd, bytes([byte[0] ^ 0xFF]), at)
    finally:
        os.close(fd)


def write_snapshot(root: Path) -> int:
    """A snapshot of the state as a fresh open replays it (chunks over every step), written
    without appending to the commits log; its version."""
    ns = open_namespace(config(root), create=False)
    try:
        at, raw = ns.ledger.state.snapshot()  # no clean record appended
        ns.store.write_snapshot(SNAPSHOT_NAME, at, raw)
        return at
    finally:
        ns.close()


def snapshot_path(root: Path, version: int) -> Path:
    return root / NS / "snapshots" / f"wal.{version:020d}"


@pytest.fixture
def wal(tmp_path: Path) -> tuple[Path, Path, int, dict[int, tuple[int, int]]]:
    """A file WAL of STEPS steps in one commits segment: (root, that segment, the commits
    offset of DAMAGED_STEP's record, the segment's frame spans)."""
    root = tmp_path / "wal"
    ns = open_namespace(config(root))
    try:
        for s in range(STEPS):
            assert write_step(ns, "w", s, {"t": [{"id": s, "note": f"row {s}"}]}) == s
    finally:
        ns.close()
    (segment,) = sorted((root / NS / "commits").glob("*.seg"))
    commits = open_store("file", NS, path=str(root)).open_log("commits")
    entries = list(commits.read(0))
    assert [e.key for e in entries] == [ORIGINAL, COPY] * (len(entries) // 2)
    offset = next(e.offset for e in entries if e.key == ORIGINAL and isinstance(
        record := decode_record(e.value, namespace=NS, offset=e.offset)[0], StepCommit)
        and record.writer_step == DAMAGED_STEP)
    assert entries[offset + 1].value == entries[offset].value
    return root, segment, offset, frame_spans(segment)


@pytest.mark.parametrize("which", ["original", "copy"])
def test_every_byte_of_one_copy_flipped_loses_no_step(wal, which):
    """This tests that flipping any one byte of a step record's original frame (or, in
    the other case, of its copy's frame) leaves all 20 steps readable by content under
    the same step numbers: on an open that replays the whole commits log, and on one
    from a snapshot (written while that frame was damaged) whose chunk is read back
    from the damaged range."""
    root, segment, offset, spans = wal
    first, end = spans[offset if which == "original" else offset + 1]
    assert view(root) == expected()
    middle = (first + end) // 2
    flip(segment, middle)
    version = write_snapshot(root)  # written after the damage: replay used the copy
    flip(segment, middle)
    snap, hidden = snapshot_path(root, version), root / "hidden-snapshot"
    failures = []
    for at in range(first, end):
        flip(segment, at)
        try:
            shutil.move(snap, hidden)
            without = view(root)
            shutil.move(hidden, snap)
            with_snapshot = view(root)
        except CorruptEntryError as exc:
            failures.append(f"byte {at - first} of the frame: {exc}")
            if hidden.exists():
                shutil.move(hidden, snap)
        else:
            if without != expected() or with_snapshot != expected():
                failures.append(f"byte {at - first} of the frame: other rows read back")
        flip(segment, at)
    assert not failures, f"{len(failures)} of {end - first} bytes:\n" + "\n".join(failures[:10])


def test_both_copies_damaged_is_a_typed_error_naming_the_offset(wal):
    """This tests that a record whose original and copy are both damaged is lost: the open
    (replay) and the read of a snapshot's chunk fail with a CorruptEntryError naming the
    commits offset, saying the record is lost and nothing was renumbered; no step is
    numbered without it."""
    root, segment, offset, spans = wal
    version = write_snapshot(root)
    for o in (offset, offset + 1):
        flip(segment, sum(spans[o]) // 2)
    with pytest.raises(CorruptEntryError, match=rf"commits offset {offset} is damaged .*"
                       r"lost.*no step was renumbered") as caught:
        view(root)  # from the snapshot: its chunk reads the damaged range back
    assert caught.value.where["offset"] == offset
    snapshot_path(root, version).unlink()
    with pytest.raises(CorruptEntryError, match=rf"commits offset {offset} is damaged") as caught:
        open_namespace(config(root), create=False)  # replay stops there
    assert caught.value.where["offset"] == offset
    report = run_check(open_store("file", NS, path=str(root)))
    assert not report.ok
    assert [p.where.get("offset") for p in report.problems] == [offset]


@pytest.mark.parametrize("which", ["original", "copy"])
def test_a_writer_goes_on_after_damage_a_copy_saved(wal, which):
    """This tests that with one copy of a record damaged, a new step gets the next number
    and reads back, in this handle and after a reopen."""
    root, segment, offset, spans = wal
    flip(segment, sum(spans[offset if which == "original" else offset + 1]) // 2)
    ns = open_namespace(config(root), create=False)
    try:
        assert write_step(ns, "w", STEPS, {"t": [{"id": STEPS, "note": f"row {STEPS}"}]}) == STEPS
        assert ns.steps() == range(STEPS + 1)
        assert [(r["_step"], r["id"]) for r in read_steps(ns, "t").to_pylist()] == \
            [(s, s) for s in range(STEPS + 1)]
    finally:
        ns.close()
    assert view(root) == expected(STEPS + 1)


@pytest.mark.parametrize("which", ["original", "copy"])
def test_check_reports_damage_a_copy_saved_once_as_a_warning(wal, which):
    """This tests that `check` names a damaged entry whose other copy was read once, as
    a warning saying nothing was lost (exit 0), also when a snapshot's chunk reads the
    damaged range again."""
    root, segment, offset, spans = wal
    damaged = offset if which == "original" else offset + 1
    flip(segment, sum(spans[damaged]) // 2)
    write_snapshot(root)
    report = run_check(open_store("file", NS, path=str(root)))
    assert report.ok, [p.text() for p in report.problems]
    saved = [w for w in report.warnings if "commits" in w]
    assert len(saved) == 1, report.warnings
    assert f"log=commits offset={damaged}: " in saved[0] and "nothing lost" in saved[0]
    if which == "original":
        assert f"commits offset {offset} is damaged" in saved[0]
        assert f"its copy at {offset + 1} was read" in saved[0]


# -- the reading rule, entry by entry ------------------------------------------------


class DamagedLog(Log):
    """A log of given entries, some of whose offsets are damaged (as the file log reads
    them: CorruptEntryError naming the offset)."""

    def __init__(self, keys: list[bytes], damaged: set[int]) -> None:
        super().__init__(NS, "commits")
        self.entries = [Entry(i, k, encode_meta({"k": "expire", "before": i}), (), 0)
                        for i, k in enumerate(keys)]
        self.damaged = damaged

    def append(self, records: list[Record]) -> list[int]:
        raise NotImplementedError

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        high = len(self.entries)
        self.check_range(start, 0, high)
        return self._iter(start, high if end is None else min(end, high))

    def _iter(self, start: int, stop: int) -> Iterator[Entry]:
        for offset in range(start, stop):
            if offset in self.damaged:
                raise CorruptEntryError("CRC mismatch", log="commits", offset=offset)
            yield self.entries[offset]

    def low_watermark(self) -> int:
        return 0

    def high_watermark(self) -> int:
        return len(self.entries)

    def delete_before(self, offset: int) -> None:
        raise NotImplementedError


R, C, OLD = ORIGINAL, COPY, b""


@pytest.mark.parametrize(("keys", "damaged", "start", "end", "records", "saved", "lost"), [
    ([R, C, R, C, R, C], set(), 0, None, [(0, 0), (2, 2), (4, 4)], [], []),
    ([R, C, R, C, R, C], {2}, 0, None, [(0, 0), (2, 3), (4, 4)], [(2, 3)], []),
    ([R, C, R, C, R, C], {3}, 0, None, [(0, 0), (2, 2), (4, 4)], [(3, 2)], []),
    ([R, C, R, C, R, C], {2, 3}, 0, None, [(0, 0)], [], [2]),
    ([R, C, R, C, R, C], {0}, 0, None, [(0, 1), (2, 2), (4, 4)], [(0, 1)], []),
    ([R, C, R, C, R, C], {5}, 0, None, [(0, 0), (2, 2), (4, 4)], [(5, 4)], []),
    # a read that starts past a record: its copy is skipped; a damaged one is looked back at
    ([R, C, R, C, R, C], set(), 1, None, [(2, 2), (4, 4)], [], []),
    ([R, C, R, C, R, C], {1}, 1, None, [(2, 2), (4, 4)], [(1, 0)], []),
    # a range's last record damaged: its copy lies one past the range's end
    ([R, C, R, C, R, C], {2}, 0, 3, [(0, 0), (2, 3)], [(2, 3)], []),
    ([R, C, R, C, R, C], {2, 3}, 0, 3, [(0, 0)], [], [2]),
    # records written before copies existed (empty key): a damaged one is lost
    ([OLD, OLD, OLD, R, C], {1}, 0, None, [(0, 0)], [], [1]),
    ([OLD, OLD, R, C], set(), 0, None, [(0, 0), (1, 1), (2, 2)], [], []),
    ([OLD, R, C, R, C], {3}, 0, None, [(0, 0), (1, 1), (3, 4)], [(3, 4)], []),
])
def test_the_reading_rule(keys, damaged, start, end, records, saved, lost):
    """This tests the reading rule on every shape: a copy after a read entry is skipped;
    a damaged original is read from its copy at its own offset; a damaged copy after a
    read original costs nothing; a record with neither copy readable is lost and
    reading stops there (a reader raises; check's items go on)."""
    log = DamagedLog(keys, damaged)
    items = list(CommitsReader(log, start, end).items())
    got = [(o, e.offset) for o, e in (i for i in items if isinstance(i, tuple))]
    assert [(s.damaged, s.read) for s in items if isinstance(s, Saved)] == saved
    assert [x.error.where["offset"] for x in items if isinstance(x, Lost)] == lost
    if lost:
        assert got[:len(records)] == records
        with pytest.raises(CorruptEntryError, match=rf"commits offset {lost[0]} is damaged"):
            list(CommitsReader(log, start, end))
    else:
        assert got == records
        reader = CommitsReader(log, start, end)
        assert [(o, e.offset) for o, e in reader] == records
        assert reader.position == (len(keys) if end is None else max(end, reader.position))


@pytest.mark.backends("file", "memory", "kafka-confluent", "s3")
def test_a_snapshot_over_copies_is_format_6_and_one_without_is_format_5(make_store):
    """This tests that a snapshot is written in format 6 where the store writes each
    commits record twice (a release that would count the copies in a chunk's range as
    steps refuses format 6 by name) and in format 5 where it writes one (Kafka, S3: an
    older release reads those as before), and that a reopen reads it back whole."""
    store = make_store()
    ns = Namespace(store)
    for step in range(3):
        write_step(ns, "w", step, {"t": [{"id": step}]})
    Cleaner(ns, grace_ms=0).run_once()
    version, raw = store.read_snapshot(SNAPSHOT_NAME)
    doc = json.loads(open_snapshot(raw, store.namespace, version)[0])
    assert doc["v"] == (6 if store.record_copies == 2 else 5)
    ns.close()
    again = Namespace(make_store(), create=False)
    try:
        assert list(again.steps()) == [0, 1, 2]
        assert read_steps(again, "t").column("id").to_pylist() == [0, 1, 2]
    finally:
        again.close()
