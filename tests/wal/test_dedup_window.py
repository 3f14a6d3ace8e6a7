"""A bounded deduplication window (wal/replay/dedup.py): what replay remembers of committed pairs
stays small, and a commit it can no longer judge is a typed error in every process,
never a silent second step. Races at the window's edge are forced with failpoints."""

from __future__ import annotations

import json
import random
import time

import pyarrow as pa
import pytest

from pyspark_durable.errors import ConfigError, WriterStepExpired
from pyspark_durable.log import Record
from pyspark_durable.wal import Cleaner, Namespace, failpoints
from pyspark_durable.wal.format.columns import decode_block, encode_blocks
from pyspark_durable.wal.format.records import CleanRecord, NsRecord, OneOffsRecord, encode_meta
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay.dedup import DEDUP_ONE_OFFS, DEDUP_STEPS, DEDUP_WINDOW_MS, Dedup
from pyspark_durable.wal.replay.oneoff_block import ONE_OFF_SCHEMA
from pyspark_durable.wal.replay.state import NamespaceState

WINDOW = 10_000


def rows(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i], pa.int64())})


def write(ns: Namespace, writer: str, wstep: int, started_ms: int | None = None) -> int:
    a = ns.begin(writer, wstep)
    a.write("t", rows(wstep))
    return a.commit(started_ms=started_ms)


def full_replay(ns: Namespace) -> NamespaceState:
    state = NamespaceState(ns.name)
    state.replay(ns.store.open_log(COMMITS_LOG))
    return state


def agree(ns: Namespace, store) -> None:
    """A full replay, a recovery from the newest snapshot and this handle decide alike."""
    full, recovered = full_replay(ns), Namespace(store).ledger.state
    for s in (full, recovered):
        assert (s.next_step, s.pairs, s.writer_last) == \
            (ns.ledger.state.next_step, ns.ledger.state.pairs, ns.ledger.state.writer_last)


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_new_wal_remembers_a_writers_newest_steps_and_refuses_older_ones(make_store):
    """This tests that a streaming writer's recommits of remembered writer steps return
    their step (no new step), that only its newest DEDUP_STEPS pairs are kept (a
    snapshot holds that many, not its whole history), and that a recommit of an older,
    forgotten writer step is WriterStepExpired with nothing committed, alike in a full
    replay, a recovery and the committing handle."""
    ns = Namespace(make_store())
    assert (ns.ledger.state.dedup.window_ms, ns.ledger.state.dedup.steps) == (DEDUP_WINDOW_MS, DEDUP_STEPS)
    n = DEDUP_STEPS + 36
    steps = [write(ns, "q", i) for i in range(n)]
    assert steps == list(range(n))
    assert sorted(ws for (w, ws) in ns.ledger.state.pairs if w == "q") == list(range(36, n))
    assert write(ns, "q", n - 1) == n - 1 and write(ns, "q", 40) == 40  # duplicates
    with pytest.raises(WriterStepExpired, match=r"writer step 7 of writer 'q' is older than "
                       rf"the {DEDUP_STEPS} newest writer steps the WAL remembers of it"):
        write(ns, "q", 7)
    assert ns.steps() == range(0, n)
    Cleaner(ns, grace_ms=0).run_once()
    agree(ns, make_store())
    assert write(ns, "q", n) == n  # the next micro-batch


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_one_off_writer_is_forgotten_after_the_window_and_its_recommit_refused(make_store):
    """This tests one-off writers (batch writes: started_ms): remembered while the WAL's
    clock (the newest commit or cleaner-pass time) is within the window of their start,
    forgotten after it, and a recommit of a forgotten pair, which carries the same
    start, is WriterStepExpired, never a second step; a newer batch writer commits."""
    ns = Namespace(make_store())
    ns.set_dedup_window(WINDOW)
    t0 = int(time.time() * 1000)  # the commits' own times move the clock too
    assert write(ns, "batch-a", 0, started_ms=t0) == 0
    ns.ledger.append(CleanRecord(t0 + WINDOW - 1, {}))  # a pass inside the window
    assert write(ns, "batch-a", 0, started_ms=t0) == 0  # still remembered: its step
    ns.ledger.append(CleanRecord(t0 + WINDOW + 1, {}))  # the clock passes the window
    ns.refresh()
    assert "batch-a" not in ns.ledger.state.dedup.writers
    with pytest.raises(WriterStepExpired, match=rf"began at {t0} ms, no later than a "
                       rf"one-off writer the WAL forgot \(begun at {t0} ms\)"):
        write(ns, "batch-a", 0, started_ms=t0)
    assert ns.steps() == range(0, 1)
    assert write(ns, "batch-b", 0, started_ms=t0 + WINDOW + 2) == 1
    Cleaner(ns, grace_ms=0).run_once()
    agree(ns, make_store())


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_one_off_writers_past_the_bound_are_forgotten_oldest_start_first(make_store):
    """This tests the bound on one-off writers remembered (an `oneoffs` record; a new WAL
    has DEDUP_ONE_OFFS): past it the writer with the oldest start is forgotten, so a
    recommit of it is WriterStepExpired, never a second step; a recommit of one still
    remembered returns its step; a new writer that began no later than every one
    remembered is refused (it would be forgotten at once), one that began later
    commits; a full replay, a recovery and the handle agree."""
    ns = Namespace(make_store())
    assert ns.ledger.state.dedup.max_one_offs == DEDUP_ONE_OFFS
    ns.ledger.append(OneOffsRecord(3))
    t0 = int(time.time() * 1000)
    assert [write(ns, f"batch-{i}", 0, started_ms=t0 + i) for i in range(5)] == list(range(5))
    assert sorted(ns.ledger.state.dedup.writers) == ["batch-2", "batch-3", "batch-4"]
    assert write(ns, "batch-3", 0, started_ms=t0 + 3) == 3  # remembered: its step
    with pytest.raises(WriterStepExpired, match=r"no later than a one-off writer the WAL "
                       rf"forgot \(begun at {t0 + 1} ms\)"):
        write(ns, "batch-1", 0, started_ms=t0 + 1)
    with pytest.raises(WriterStepExpired, match=r"it would be forgotten at once"):
        write(ns, "batch-late", 0, started_ms=t0 + 2)
    assert write(ns, "batch-5", 0, started_ms=t0 + 10) == 5
    assert ns.steps() == range(0, 6)
    assert sorted(ns.ledger.state.dedup.writers) == ["batch-3", "batch-4", "batch-5"]
    Cleaner(ns, grace_ms=0).run_once()
    agree(ns, make_store())
    assert Namespace(make_store()).ledger.state.dedup.max_one_offs == 3


@pytest.mark.parametrize(("racing", "past"), [(True, False), (True, True), (False, True)])
@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_recommit_racing_a_cleaner_at_the_edge_of_the_window(make_store, racing, past):
    """This tests the forced interleaving at the window's edge: a committer checked its
    pair (young enough, not committed yet) and is paused before it appends; meanwhile a
    racing committer of the same pair commits it (``racing``), and a cleaner pass moves
    the WAL's clock to just inside the window or just past it (``past``); then the paused
    one appends. Inside, it gets the racing committer's step (the duplicate is found);
    past, a pair that was committed and forgotten is refused in every process
    (WriterStepExpired), and one that never was is a step (the clock rules' exact test:
    nothing began after it and was forgotten, so it cannot be a duplicate): never a second
    step, never a step replay cannot judge."""
    ns = Namespace(make_store())
    ns.set_dedup_window(WINDOW)
    t0 = int(time.time() * 1000)  # the commits' own times move the clock too
    other, cleaner = Namespace(make_store()), Namespace(make_store())
    a = ns.begin("batch-x", 0)
    a.write("t", rows(1))
    receipt = a.receipt()

    def at_point(point: str) -> None:
        if point != "commit.checked":
            return
        failpoints.install(None)
        if racing:
            assert write(other, "batch-x", 0, started_ms=t0) == 0
        cleaner.ledger.append(CleanRecord(t0 + WINDOW + (1 if past else -1), {}))

    failpoints.install(at_point)
    try:
        if past and racing:
            with pytest.raises(WriterStepExpired, match=rf"began at {t0} ms"):
                ns.commit("batch-x", 0, [receipt], started_ms=t0)
        else:
            assert ns.commit("batch-x", 0, [receipt], started_ms=t0) == 0
    finally:
        failpoints.install(None)
    assert ns.steps() == range(0, 1)
    assert other.steps() == ns.steps() == Namespace(make_store()).steps()
    agree(ns, make_store())


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_wal_without_a_dedup_record_keeps_every_pair_until_a_cleaner_bounds_it(make_store):
    """This tests a WAL an older version wrote (no `dedup` record): its step records are
    judged as that version did, every pair remembered, so their step numbers never
    change; a cleaner pass then bounds it, and a recommit of a forgotten writer step is
    refused."""
    store = make_store()
    commits = store.open_log(COMMITS_LOG, create=True)
    commits.append([Record(b"", encode_meta({**NsRecord("old", 0, "inc0").to_json(),
                                             "i": "inc0"}))])
    ns = Namespace(store)
    assert ns.ledger.state.dedup.window_ms is None
    n = DEDUP_STEPS + 10
    assert [write(ns, "q", i) for i in range(n)] == list(range(n))
    assert write(ns, "q", 3) == 3  # every pair is remembered
    Cleaner(ns, grace_ms=0).run_once()
    assert ns.ledger.state.dedup.window_ms == DEDUP_WINDOW_MS
    assert len(ns.ledger.state.pairs) == DEDUP_STEPS
    with pytest.raises(WriterStepExpired):
        write(ns, "q", 3)
    agree(ns, make_store())


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_dedup_window_arguments_are_checked(make_store):
    """This tests that a window or step count that is not a positive integer is a
    ConfigError naming it, and nothing is appended."""
    ns = Namespace(make_store())
    high = ns.store.open_log(COMMITS_LOG).high_watermark()
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError, match="dedup window"):
            ns.set_dedup_window(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="dedup steps 0"):
        ns.set_dedup_window(WINDOW, 0)
    assert ns.store.open_log(COMMITS_LOG).high_watermark() == high


def _decide(d: Dedup, op: tuple, step: int) -> str | int | None:
    """What replay decides for one record (as ``NamespaceState._apply_step`` asks)."""
    kind, writer, wstep, started, ts = op
    if kind == "writer":
        d.note(writer, wstep)
        return None
    d.tick_step(ts)
    done = d.committed(writer, wstep)
    if done is not None:
        return f"duplicate of {done}"
    why = d.too_old(writer, wstep, started)
    if why is not None:
        return why
    d.accept(writer, wstep, step, started)
    return step


def _reloaded(d: Dedup) -> Dedup:
    """``d`` as a process recovering from a snapshot written now holds it."""
    doc, block = d.encode()
    raw, where = encode_blocks({"one_offs": block})
    return Dedup.from_json(json.loads(json.dumps(doc)),
                           decode_block(raw, where, "one_offs", ONE_OFF_SCHEMA))


def test_one_off_writers_held_as_columns_decide_as_a_full_replay():
    """Snapshots hold one-off writers as an Arrow block read row by row (no object per
    writer at an open). A handle that writes snapshots, and processes recovering from
    them at any record, decide every record as a replay that never snapshotted: the same
    steps, refusals, writers forgotten (oldest start first, ties by id) and clock."""
    rng = random.Random(36)
    ops, ts = [], 1_000_000
    for i in range(1_500):
        ts += rng.choice((0, 1, 5, 50)) if rng.random() > 0.01 else 3_000  # a pause
        r = rng.random()
        if r < 0.08:  # a streaming writer, some steps twice, some out of order
            ops.append(("step", f"q{rng.randrange(3)}", rng.randrange(i // 20 + 2), None, ts))
        elif r < 0.1:
            ops.append(("writer", f"q{rng.randrange(3)}", rng.randrange(i // 20 + 2), None, ts))
        else:  # one-off writers: retries, starts tied, ids beyond ASCII, a new start
            writer = rng.choice((f"b{rng.randrange(i + 1)}", f"b{i}", f"é{i % 7}", "b"))
            started = (ts - rng.randrange(600)) // 50 * 50  # many starts tied
            ops.append(("step", writer, rng.randrange(2), started, ts))
    full = Dedup()
    full.set_policy(2_000, 3)
    full.set_clock_rules(500)
    full.set_one_offs(15)
    kept, reloaded = _reloaded(full), _reloaded(full)
    full_steps = kept_steps = reloaded_steps = most = 0
    least = 15  # one-offs remembered after the bound was reached: a pause forgets them
    for i, op in enumerate(ops):
        if i % 97 == 0:
            kept.encode()  # a committer's snapshot: this handle moves onto the block
        if i % 89 == 0:
            reloaded = _reloaded(reloaded)
        a, b, c = (_decide(full, op, full_steps), _decide(kept, op, kept_steps),
                   _decide(reloaded, op, reloaded_steps))
        assert a == b == c, (i, op)
        full_steps += isinstance(a, int)
        kept_steps += isinstance(b, int)
        reloaded_steps += isinstance(c, int)
        most = max(most, full.one_offs)
        least = min(least, full.one_offs) if most == 15 else least
        for d in (kept, reloaded):
            assert (d.one_offs, d.forgot_start_ms, d.clock_ms) == \
                (full.one_offs, full.forgot_start_ms, full.clock_ms), i
    # the bound and the window both forgot writers, and replay refused some records
    assert most == 15 and least < 3 and full.forgot_start_ms is not None
    assert full_steps < len(ops) * 0.9
    for d in (kept, reloaded):
        assert {w: (s.last, s.pairs, s.forgot, s.started_ms) for w, s in d.writers.items()} == \
            {w: (s.last, s.pairs, s.forgot, s.started_ms) for w, s in full.writers.items()}


def test_a_writer_committing_out_of_order_keeps_its_newest_writer_steps():
    """Retried and late micro-batches commit a writer's steps out of order. This tests
    that the bound then still forgets the writer's lowest writer step, as a model that
    scans every remembered pair for the lowest one decides, record by record: the same
    pairs remembered, the same step forgotten and the same refusals, in this handle and
    in one recovering from a snapshot written along the way (its runs are written
    sorted, whatever the order replay met them in)."""
    rng = random.Random(7)
    d, steps = Dedup(), 4
    d.set_policy(DEDUP_WINDOW_MS, steps)
    model: dict[int, int] = {}  # writer step -> step
    forgot, step, out_of_order = -1, 0, 0
    for i in range(600):
        wstep = rng.randrange(i // 3 + 8)
        out_of_order += bool(model) and wstep < max(model)
        if i % 50 == 0:
            d = _reloaded(d)
        got = _decide(d, ("step", "q", wstep, None, 1_000 + i), step)
        if wstep in model:
            want: str | int | None = f"duplicate of {model[wstep]}"
        elif wstep <= forgot:
            want = "too old"
        else:
            want = step
            model[wstep] = step
            while len(model) > steps:
                lowest = min(model)
                del model[lowest]
                forgot = max(forgot, lowest)
        if want == "too old":
            assert isinstance(got, str) and "is older than the 4 newest" in got, (i, got)
        else:
            assert got == want, (i, wstep)
        step += isinstance(got, int)
        w = d.writers["q"]
        assert (w.pairs, w.forgot) == (model, forgot), i
        assert list(w.pairs) == sorted(w.pairs), i  # the order the bound relies on
    assert out_of_order > 100 and step > 50
