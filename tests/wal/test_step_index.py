"""Recovery whose cost is what is live: a snapshot covers its steps as chunks, read back
from the commits log on demand, numbered exactly as a replay of the whole log numbers
them (refused records included), across reopen, retention, and a cleaner killed while
it snapshots."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.errors import CorruptEntryError
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace, RetentionPolicy
from pyspark_durable.wal.format.records import CleanRecord, Run, StepCommit
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay import step_index
from pyspark_durable.wal.replay.copies import CommitsReader
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.replay.step_index import Chunk, chunk_loader
from pyspark_durable.wal.upkeep import cleaner

CHUNK = 8  # steps per chunk in these tests: a few dozen steps make several chunks


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    monkeypatch.setattr(step_index, "CHUNK_STEPS", CHUNK)
    monkeypatch.setattr(cleaner, "SNAPSHOT_EVERY_RECORDS", 1)  # a snapshot every pass


def rows(n: int, start: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64())})


def commit_steps(ns: Namespace, first: int, count: int) -> None:
    """Steps over two regions and two tables, with refused records between them: a
    duplicate of a committed pair, and a step below a bound a cleaner recorded first."""
    for i in range(first, first + count):
        a = ns.begin("w", i)
        a.write("t", rows(2, i * 10), region_id=i % 2)
        if i % 3 == 0:
            a.write("u", rows(1, i * 10), region_id=1)
        a.commit()
        if i % 5 == 0:  # a racing committer's record of the same pair: refused
            ns.ledger.append(ns.step_commit(ns.steps().stop - 1))
    # a step whose run starts below a recorded bound: refused in every replay
    ns.ledger.append(CleanRecord(0, {7: 5}))
    info = ns.tables.lookup("t")
    ns.ledger.append(StepCommit("late", 0, ("x",), (Run(7, info.table_id, 1, 2, 1, 8),), 0))
    ns.refresh()


def full_replay(ns: Namespace) -> dict[int, tuple]:
    """Every step as a replay of the whole commits log from offset 0 numbers it."""
    state = NamespaceState(ns.name)
    state.replay(ns.store.open_log(COMMITS_LOG))
    return {c.step: described(c) for c in state.index}


def described(c: StepCommit) -> tuple:
    return (c.step, c.commit_offset, c.writer_id, c.writer_step, c.runs,
            dict(c.first_sequences), c.timestamp_ms)


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_snapshot_holds_chunks_and_every_step_reads_back_as_a_full_replay(make_store):
    """This tests that after a cleaner pass (no retention: every step is needed) a new
    handle holds no step in memory, only chunks, and that every step it reads back from
    the commits log (through refused duplicates and lost runs) is the step a full replay
    numbers, with the same sequences; then steps committed after the snapshot, and a
    second snapshot, keep it so."""
    ns = Namespace(make_store())
    commit_steps(ns, 0, 30)
    reference = full_replay(ns)
    assert len(reference) == 30
    Cleaner(ns, grace_ms=0).run_once()

    opened = Namespace(make_store())
    index = opened.ledger.state.index
    assert index.tail == [] and len(index.chunks) == 4  # 30 steps in chunks of 8
    assert [c.steps for c in index.chunks] == [8, 8, 8, 6]
    assert any(c.refused for c in index.chunks)
    assert {s: described(opened.ledger.state.step(s)) for s in range(30)} == reference
    got = pa.Table.from_batches([b for sb in opened.read_step(29) for b in sb.batches])
    assert got.column("id").to_pylist() == [290, 291]

    commit_steps(opened, 30, 13)  # a tail after the snapshot, then a second snapshot
    reference = full_replay(opened)
    Cleaner(opened, grace_ms=0).run_once()
    again = Namespace(make_store())
    assert again.ledger.state.index.tail == []
    assert {s: described(again.ledger.state.step(s)) for s in range(43)} == reference
    got = pa.Table.from_batches([b for sb in again.read_step(36) for b in sb.batches])
    assert sorted(got.column("id").to_pylist()) == [360, 360, 361]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_refusal_after_a_snapshots_last_step_is_kept_for_the_next_fold(make_store):
    """This tests the steps of one chunk folded by two processes: a record refused after
    the last step a snapshot covers (a duplicate here), then, in another handle that
    recovered from that snapshot, more steps folded into the same chunk. The chunk's
    range now spans the refused record, which that handle never replayed: the snapshot
    keeps it pending, so every step still reads back as a full replay numbers it."""
    ns = Namespace(make_store())
    for i in range(3):
        write_one(ns, i)
    ns.ledger.append(ns.step_commit(2))  # refused: a duplicate of (w, 2)
    Cleaner(ns, grace_ms=0).run_once()
    other = Namespace(make_store())
    assert other.ledger.state.index.tail == [] and other.ledger.state.index.refused
    for i in range(3, 5):
        write_one(other, i)
    reference = full_replay(other)
    Cleaner(other, grace_ms=0).run_once()
    opened = Namespace(make_store())
    assert [c.steps for c in opened.ledger.state.index.chunks] == [5]  # one chunk, merged
    assert {s: described(opened.ledger.state.step(s)) for s in range(5)} == reference


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_long_lived_handle_reads_its_chunks_after_another_cleaner_trimmed(make_store):
    """This tests two cleaners in two long-lived handles: one folded its index while
    step 5 was the first needed, the other expired further, snapshotted twice and trimmed
    the commits log below its snapshots' first chunk. Chunks are aligned on step
    numbers, so the trim point is never inside a chunk the first handle still needs: it
    refreshes, runs its own pass and reads every retained step as a full replay did."""
    p = Namespace(make_store())
    for i in range(20):
        write_one(p, i)
    reference = full_replay(p)
    p.expire(5)
    Cleaner(p, grace_ms=0).run_once()
    q = Namespace(make_store())
    q.expire(14)
    Cleaner(q, grace_ms=0).run_once()
    write_one(q, 20)
    reference[20] = described(q.step_commit(20))
    q.expire(15)
    Cleaner(q, grace_ms=0).run_once()
    assert q.store.open_log(COMMITS_LOG).low_watermark() > 0  # the log was trimmed
    assert p.steps() == range(15, 21)
    Cleaner(p, grace_ms=0).run_once()
    for s in range(15, 21):
        assert described(p.step_commit(s)) == reference[s]
        assert sum(b.num_rows for sb in p.read_step(s) for b in sb.batches) == 1


def write_one(ns: Namespace, i: int) -> None:
    a = ns.begin("w", i)
    a.write("t", rows(1, i))
    a.commit()


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_retention_cuts_the_first_chunk_exactly(make_store):
    """This tests that a retention point inside a chunk frees the entries of the steps
    before it (the chunk is split at the first needed step, not kept whole) and that the
    steps after it still read back as a full replay numbers them."""
    ns = Namespace(make_store())
    commit_steps(ns, 0, 20)
    reference = full_replay(ns)
    Cleaner(ns, grace_ms=0).run_once()  # everything folded into chunks
    ns.set_retention(RetentionPolicy(max_steps=7))
    report = Cleaner(ns, grace_ms=0).run_once()
    assert report.first_retained_step == 13
    reopened = Namespace(make_store())
    assert reopened.ledger.state.base_step == 13 and reopened.steps() == range(13, 20)
    assert {s: described(reopened.ledger.state.step(s)) for s in range(13, 20)} == \
        {s: reference[s] for s in range(13, 20)}
    for region_id in (0, 1):  # freed up to the first entry a retained step refers to
        assert reopened.store.open_region(region_id).low_watermark() == min(
            r.start for s in range(13, 20) for r in reference[s][4] if r.region_id == region_id)


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_chunk_that_does_not_match_its_records_is_corrupt(make_store):
    """This tests that a chunk read back from a commits log that holds other steps than
    the snapshot says (a log restored from elsewhere, a damaged snapshot that kept its
    CRC) is a typed CorruptEntryError naming the range, never steps numbered wrongly."""
    ns = Namespace(make_store())
    commit_steps(ns, 0, 10)
    Cleaner(ns, grace_ms=0).run_once()
    chunk = Namespace(make_store()).ledger.state.index.chunks[0]
    commits = ns.store.open_log(COMMITS_LOG)

    def decode(value: bytes, offset: int):
        from pyspark_durable.wal.format.records import decode_record
        return decode_record(value, namespace=ns.name, offset=offset)[0]

    load = chunk_loader(lambda start, end: CommitsReader(commits, start, end), decode, ns.name)
    assert len(load(chunk)) == chunk.steps
    for wrong in (Chunk(chunk.first_step, chunk.steps + 1, chunk.start, chunk.end, chunk.refused,
                        chunk.seqs, chunk.starts),
                  Chunk(chunk.first_step, chunk.steps, chunk.start, chunk.end, (),
                        chunk.seqs, chunk.starts),
                  Chunk(chunk.first_step, chunk.steps, chunk.start, chunk.end, chunk.refused,
                        tuple((r, t, f + 1, e) for r, t, f, e in chunk.seqs), chunk.starts)):
        with pytest.raises(CorruptEntryError, match=rf"commits offsets \[{chunk.start}, "):
            load(wrong)
    # a step record writing a (region, table) the chunk does not know: named, not skipped
    assert len(chunk.seqs) > 1
    unknown = Chunk(chunk.first_step, chunk.steps, chunk.start, chunk.end, chunk.refused,
                    chunk.seqs[1:], chunk.starts)
    with pytest.raises(CorruptEntryError, match=r"step record at commits offset \d+ writes "
                       r"region \d+ table \d+, which the snapshot's step index"):
        load(unknown)


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_pass_snapshots_only_when_the_replay_after_the_newest_grew(make_store, monkeypatch):
    """This tests that a cleaner pass writes no new snapshot while fewer than
    SNAPSHOT_EVERY_RECORDS records came since the newest one (each snapshot is a stored
    copy of the state), writes one once they did, and that an open in between replays
    only those records on top of the newest snapshot, reading every step as before."""
    monkeypatch.setattr(cleaner, "SNAPSHOT_EVERY_RECORDS", 25)
    ns = Namespace(make_store())
    commit_steps(ns, 0, 10)
    Cleaner(ns, grace_ms=0).run_once()
    first = ns.store.snapshot_versions("wal")
    commit_steps(ns, 10, 4)  # fewer than 25 records
    Cleaner(ns, grace_ms=0).run_once()
    assert ns.store.snapshot_versions("wal") == first
    reference = full_replay(ns)
    opened = Namespace(make_store())
    assert [c.step for c in opened.ledger.state.index.tail] == list(range(10, 14))
    assert {s: described(opened.ledger.state.step(s)) for s in range(14)} == reference
    commit_steps(ns, 14, 20)
    Cleaner(ns, grace_ms=0).run_once()
    newest = ns.store.snapshot_versions("wal")[-1]
    assert newest > first[-1] and Namespace(make_store()).ledger.state.index.tail == []


CHILD = """
import os, sys
os.environ["DURABLEWAL_FAILPOINT"] = sys.argv[4] + ":kill-group=" + str(os.getpgid(0))
from pyspark_durable.log import open_store
from pyspark_durable.wal import Cleaner, Namespace, RetentionPolicy
from pyspark_durable.wal.replay import step_index
from pyspark_durable.wal.upkeep import cleaner
step_index.CHUNK_STEPS = 8
ns = Namespace(open_store("file", sys.argv[2], path=sys.argv[1]))
ns.set_retention(RetentionPolicy(max_steps=int(sys.argv[3])))
Cleaner(ns, grace_ms=0).run_once()
print("pass ended", flush=True)
"""


@pytest.mark.crash
@pytest.mark.parametrize("point", ["clean.snapshot", "clean.snapshotted"])
def test_cleaner_killed_mid_snapshot_leaves_a_namespace_that_reads_every_step(
        tmp_path: Path, namespace: str, point: str):
    """This tests a cleaner SIGKILLed after it folded its index but before the snapshot
    was written (``clean.snapshot``), and after it was written but before the commits
    log was cut (``clean.snapshotted``): a new handle recovers, holds every retained step
    exactly as a full replay numbered it, reads its rows, and the next pass finishes."""
    path = tmp_path / "wal"
    ns = Namespace(open_store("file", namespace, path=str(path)))
    commit_steps(ns, 0, 20)
    Cleaner(ns, grace_ms=0).run_once()  # an earlier snapshot, with chunks
    commit_steps(ns, 20, 11)
    reference = full_replay(ns)
    ns.close()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), namespace, "12", point],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    out, _ = child.communicate(timeout=120)
    assert child.returncode == -signal.SIGKILL and "pass ended" not in out

    opened = Namespace(open_store("file", namespace, path=str(path)))
    steps = opened.steps()
    assert steps == range(19, 31)  # the killed pass's expire record is in the log
    for s in steps:
        assert described(opened.ledger.state.step(s)) == reference[s]
        assert sum(b.num_rows for sb in opened.read_step(s) for b in sb.batches) == \
            sum(r.rows for r in reference[s][4])
    Cleaner(opened, grace_ms=0).run_once()
    last = Namespace(open_store("file", namespace, path=str(path)))
    assert {s: described(last.ledger.state.step(s)) for s in range(19, 31)} == \
        {s: reference[s] for s in range(19, 31)}


def test_a_pass_reads_few_region_entries_and_none_below_the_recorded_bound(tmp_path, namespace,
                                                                           monkeypatch):
    """This tests that a cleaner pass on a namespace without retention reads a logarithmic
    number of region entries (a binary search for the grace's cutoff, which it needs to
    free dead attempts' entries), and none below the bound a pass recorded before (below
    it, everything was examined; on a long history, reading there would scan, and
    CRC-check, whole old segments every pass)."""
    from pyspark_durable.log.file.log import FileLog

    ns = Namespace(open_store("file", namespace, path=str(tmp_path / "wal")))
    commit_steps(ns, 0, 12)
    reads: list[tuple[str, int]] = []
    real = FileLog.read

    def counted(self, start, end=None):
        reads.append((self.name, start))
        return real(self, start, end)

    monkeypatch.setattr(FileLog, "read", counted)
    report = Cleaner(ns).run_once()  # the default grace: an hour, nothing is that old
    assert report.freed_entries == 0
    for region_id in ns.info.regions():
        high = ns.store.open_region(region_id).high_watermark()
        mine = [at for name, at in reads if name == f"region_{region_id}"]
        assert 0 < len(mine) <= 2 + high.bit_length(), (region_id, mine)
    Cleaner(ns, grace_ms=0).run_once()  # everything but the newest entries is old now
    bounds = dict(ns.ledger.refreshed().clean_bounds)
    assert bounds and all(b > 0 for b in bounds.values())
    reads.clear()
    Cleaner(ns, grace_ms=0).run_once()
    for name, at in reads:
        if name.startswith("region_"):
            assert at >= bounds[int(name.removeprefix("region_"))] - 1, (name, at, bounds)


def counted_sizes(reference: dict[int, tuple], from_step: int) -> dict:
    """Rows, bytes and first sequence per (region, table), counted over every step."""
    found: dict = {}
    for step in sorted(reference):
        if step < from_step:
            continue
        _, _, _, _, runs, firsts, _ = reference[step]
        for run in runs:
            rows, size, first = found.get(run.key, (0, 0, firsts[run.key]))
            found[run.key] = (rows + run.rows, size + run.size_bytes, first)
    return found


def counted_spans(reference: dict[int, tuple], ns: Namespace, base: int) -> dict:
    """(retained, expired) offsets per region inside its watermarks, over every step."""
    expired_before = ns.steps().start
    found = {}
    for region_id in ns.store.list_regions():
        region = ns.store.open_region(region_id)
        low, high = region.low_watermark(), region.high_watermark()
        kept = gone = 0
        for step, (_, _, _, _, runs, _, _) in reference.items():
            for run in runs:
                if step >= base and run.region_id == region_id:
                    n = max(0, min(run.end, high) - max(run.start, low))
                    kept, gone = (kept + n, gone) if step >= expired_before else (kept, gone + n)
        found[region_id] = (kept, gone)
    return found


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_tables_and_regions_count_from_the_chunks_reading_only_the_cut_one(make_store):
    """This tests that what `durablewal tables` shows (rows, bytes, first sequence per
    region and table) and what `regions` counts (offsets of retained and of expired
    steps) equal a count over every step a full replay numbers, while reading back no
    chunk when every step is retained and only the chunk retention cuts through after;
    and that chunks of a snapshot written before chunks kept counts are read instead,
    with the same answers."""
    ns = Namespace(make_store())
    commit_steps(ns, 0, 30)
    reference = full_replay(ns)
    Cleaner(ns, grace_ms=0).run_once()
    for retention in (None, RetentionPolicy(max_steps=7)):
        if retention is not None:
            ns.set_retention(retention)
            Cleaner(ns, grace_ms=0).run_once()
        opened = Namespace(make_store())
        index = opened.ledger.state.index
        loaded = []
        loader = index._loader
        index.attach(lambda chunk, loader=loader, loaded=loaded:
                     loaded.append(chunk.first_step) or loader(chunk))
        start = opened.steps().start
        sizes = {k: (s.rows, s.size_bytes, s.first_sequence)
                 for k, s in opened.info.table_sizes(start).items()}
        spans = {r.region_id: (r.retained, r.expired) for r in opened.info.region_entries()}
        assert sizes == counted_sizes(reference, start)
        assert spans == counted_spans(reference, opened, index.base)
        if retention is None:
            assert len(index.chunks) == 4 and loaded == []
        else:  # steps 23.. retained: the chunk of steps 16..23 is cut, 24.. whole
            assert start == 23 and [c.first_step for c in index.chunks] == [16, 24]
            assert set(loaded) == {16}
        stripped = step_index.StepIndex(
            index.base, [Chunk.from_json(c.to_json()[:8]) for c in index.chunks],
            refused=index.refused)
        stripped.attach(loader)
        assert stripped.table_sizes(start) == index.table_sizes(start)
        watermarks = {r.region_id: (r.low, r.high) for r in opened.info.region_entries()}
        assert stripped.region_spans(watermarks, start) == \
            index.region_spans(watermarks, start)
