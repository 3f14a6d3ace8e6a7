"""The WAL layer on every log backend: steps, idempotency, sequences, recovery, retention."""

from __future__ import annotations

import re
import threading
import time
import types

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import DurableInputEndpoint, OutputEndpoint, read_steps, write_step
from pyspark_durable.errors import (
    AttemptLost,
    ConfigError,
    RoutingError,
    SchemaMismatch,
    StepExpired,
    StepNotCommitted,
)
from pyspark_durable.wal import Cleaner, Namespace, RetentionPolicy
from pyspark_durable.wal.upkeep import cleaner as cleaner_module

pytestmark = pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python", "s3")


def rows(tag: str, n: int, start: int = 0) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "tag": pa.array([f"{tag}-{i}" for i in range(start, start + n)], pa.string())})


@pytest.fixture
def open_ns(make_store):
    def make(**kw) -> Namespace:
        return Namespace(make_store(), **kw)
    return make


def ids(table: pa.Table) -> list[int]:
    return table.column("id").to_pylist()


def test_step_round_trip_regions_tables_formats(open_ns):
    """This tests that one step spanning regions, tables and payload formats reads back whole."""
    ns = open_ns()
    a = ns.begin("w", 0)
    a.write("orders", rows("o", 25), region_id=0)
    a.write("events", rows("e", 7), region_id=2, payload_format="avro")
    a.write(42, rows("n", 3), region_id=2)
    step = a.commit()
    assert step == 0 and ns.steps() == range(0, 1)
    got = {(sb.region_id, ns.tables.by_id(refresh=False)[sb.table_id].name): pa.Table.from_batches(sb.batches)
           for sb in ns.read_step(0)}
    assert got[(0, "orders")].equals(rows("o", 25))
    assert got[(2, "events")].equals(rows("e", 7))
    assert got[(2, "42")].equals(rows("n", 3))
    commit = ns.step_commit(0)
    assert (commit.rows, commit.regions) == (35, [0, 2])


def test_uncommitted_attempts_are_invisible(open_ns):
    """This tests that entries of attempts that never commit are never read, before or after."""
    ns = open_ns()
    ghost = ns.begin("w", 0)
    ghost.write("t", rows("ghost", 10))
    ghost.receipt()  # its entries are durable, and not committed
    assert ns.steps() == range(0, 0)
    with pytest.raises(StepNotCommitted, match=r"committed steps are \[0, 0\)"):
        list(ns.read_step(0))
    real = ns.begin("w", 0)
    real.write("t", rows("real", 4))
    assert real.commit() == 0
    assert ids(read_steps(ns, "t", with_metadata=False)) == [0, 1, 2, 3]
    assert read_steps(ns, "t").column("tag").to_pylist() == [f"real-{i}" for i in range(4)]
    assert ghost.commit() == 0  # the pair is committed: the ghost adds nothing
    assert read_steps(ns, "t").num_rows == 4


def test_region_steps_read_in_one_pass_equal_step_by_step_reads(open_ns, monkeypatch):
    """This tests that reading many steps of a region at once (what a Spark task does)
    gives exactly the rows of step-by-step reads, in step order, across foreign entries
    between runs (an aborted attempt, another table, another region), runs whose offsets
    are out of step order (two writers committing in reverse order), and a gap too wide
    to read over; and that close runs share one log read."""
    ns = open_ns(entry_max_bytes=4096)  # several entries per run
    write_step(ns, "w", 0, {"a": rows("s0a", 300), "b": rows("s0b", 5)})
    ghost = ns.begin("w", 1)  # written, never committed: foreign entries in region 0
    ghost.write("a", rows("ghost", 100))
    ghost.receipt()  # durable: a task that wrote whose batch never committed
    write_step(ns, "w", 1, {"a": rows("s1a", 200, 1000)})
    late, early = ns.begin("x", 0), ns.begin("y", 0)
    late.write("a", rows("x0", 50, 2000))  # lower offsets ...
    late.write("a", rows("x0r2", 20, 2100), region_id=2)
    early.write("a", rows("y0", 60, 3000))
    assert early.commit() == 2 and late.commit() == 3  # ... committed later
    wide = ns.begin("w", 9)
    wide.write("b", rows("wide", 20_000))  # far more than READ_GAP_ENTRIES entries
    wide.receipt()
    write_step(ns, "w", 2, {"a": rows("s4a", 10, 4000)})
    ns = open_ns()  # a reader that did not write
    steps = list(ns.steps())
    assert steps == [0, 1, 2, 3, 4]

    def tags(batches) -> list[tuple[int, int, str]]:
        return [(sb.step, sb.sequence_num, tag) for sb in batches
                for b in sb.batches for tag in b.column("tag").to_pylist()]

    by_name = {info.name: tid for tid, info in ns.tables.by_id(refresh=False).items()}
    for tables in (None, {by_name["a"]}, {by_name["b"]}):
        for region in (0, 2):
            one_by_one = [sb for s in steps for sb in ns.read_step(s, tables, {region})]
            log = ns.store.open_region(region, create=False)
            calls = []
            real = type(log).read_acknowledged  # how the WAL reads committed runs
            monkeypatch.setattr(type(log), "read_acknowledged",
                                lambda self, *a, _calls=calls, _real=real, **k:
                                _calls.append(a) or _real(self, *a, **k))
            together = list(ns.read_region_steps(region, steps, tables))
            monkeypatch.undo()
            assert tags(together) == tags(one_by_one), (tables, region)
            if region == 0 and tables is None:
                # steps 0, 1 and 2 in one read (over the ghost's and x's entries); step 3
                # (x, lower offsets than step 2) and step 4 (past the wide gap): one each
                assert len(calls) == 3, calls
    s1 = [t for _, _, t in tags(ns.read_region_steps(0, [1]))]
    assert s1 == [f"s1a-{i}" for i in range(1000, 1200)]


def test_recommit_is_idempotent_across_reopen(open_ns):
    """This tests that committing (writer, writer_step) again, even after reopening, is a no-op."""
    ns = open_ns()
    assert write_step(ns, "q", 0, {"t": rows("a", 5)}) == 0
    assert write_step(ns, "q", 1, {"t": rows("b", 5)}) == 1
    ns2 = open_ns()
    replay = ns2.begin("q", 1)
    replay.write("t", rows("dup", 5))
    assert replay.commit() == 1
    assert ns2.steps() == range(0, 2)
    assert read_steps(ns2, "t").column("tag").to_pylist() == (
        [f"a-{i}" for i in range(5)] + [f"b-{i}" for i in range(5)])


def test_concurrent_writers_get_distinct_unmixed_steps(open_ns):
    """This tests that writers committing at once get distinct steps, each holding only its rows."""
    ns = open_ns()
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            mine = Namespace(ns.store)
            for ws in range(5):
                write_step(mine, f"w{w}", ws, {"t": rows(f"w{w}s{ws}", 6)})
        except BaseException as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert ns.steps() == range(0, 20)
    seen = set()
    for step in ns.steps():
        commit = ns.step_commit(step)
        tags = ns.read_step_table(step).column("tag").to_pylist()
        assert tags == [f"{commit.writer_id}s{commit.writer_step}-{i}" for i in range(6)]
        seen.add((commit.writer_id, commit.writer_step))
    assert len(seen) == 20


def test_sequences_dense_per_table_across_reopen_and_clean(open_ns):
    """This tests that sequence numbers are +1 per entry per table, across reopen and cleaning."""
    ns = open_ns(entry_max_bytes=200)  # small entries: several per write
    for ws in range(6):
        write_step(ns, "w", ws, {"a": rows("a", 20), "b": rows("b", 3)})
    ns.expire(3)
    Cleaner(ns, grace_ms=0).run_once()
    ns = open_ns(entry_max_bytes=200)
    for ws in range(6, 9):
        write_step(ns, "w", ws, {"a": rows("a", 20), "b": rows("b", 3)})
    ns = open_ns(entry_max_bytes=200)
    for table in ("a", "b"):
        seqs = read_steps(ns, table).column("_sequence").to_pylist()
        distinct = sorted(set(seqs))
        assert distinct == list(range(distinct[0], distinct[-1] + 1)), table
        assert distinct[-1] + 1 == ns.tables.regions(ns.tables.resolve(table))[0]
    assert ns.tables.regions(ns.tables.resolve("a"))[0] > 9  # several entries per write


def test_table_routing_and_schema_errors(open_ns):
    """This tests that a table keeps one schema (type conflicts name the column and both
    types) and that a region id must be a u64."""
    ns = open_ns()
    write_step(ns, "w", 0, {"t": rows("a", 2)}, region_id=3)
    a = ns.begin("w", 1)
    with pytest.raises(RoutingError, match=r"region -1 is not a u64"):
        a.write("t", rows("a", 2), region_id=-1)
    with pytest.raises(SchemaMismatch, match=r"table=t.*column 'id' has type int64 in the "
                                             r"table and double in the rows"):
        a.write("t", pa.table({"id": [1.5]}), region_id=3)
    with pytest.raises(SchemaMismatch, match=r"table=t.*table has \(id: int64, tag: string\)"
                                             r".*mergeSchema"):
        a.write("t", pa.table({"id": [1], "extra": ["x"]}), region_id=3)
    with pytest.raises(RoutingError, match="unknown table 'nope'"):
        ns.tables.lookup("nope")


def test_expire_clean_and_expired_step_error(open_ns):
    """This tests that the cleaner frees expired steps, keeps retained ones, and names what is left."""
    ns = open_ns()
    for ws in range(5):
        write_step(ns, "w", ws, {"t": rows(f"s{ws}", 50)})
    ns.expire(3)
    report = Cleaner(ns, grace_ms=0).run_once()
    assert report.first_retained_step == 3
    assert report.freed_entries == 3
    reopened = open_ns()
    assert reopened.steps() == range(3, 5)
    with pytest.raises(StepExpired, match=r"available steps are \[3, 5\)"):
        list(reopened.read_step(1))
    assert reopened.read_step_table(4).column("tag").to_pylist()[0] == "s4-0"
    assert reopened.store.open_region(0).low_watermark() == 3
    assert write_step(reopened, "w", 2, {"t": rows("again", 1)}) == 2  # remembered pair
    assert write_step(reopened, "w", 5, {"t": rows("s5", 1)}) == 5


def test_mark_deleted_table_claims_keep_data(open_ns):
    """This tests that a table with a mark keeps its entries past step expiry until marked."""
    ns = open_ns()
    for ws in range(4):
        a = ns.begin("w", ws)
        a.write("kept", rows("k", 2), region_id=0)
        a.write("free", rows("f", 2), region_id=1)
        a.commit()
    ns.tables.mark_deleted("kept", 1)  # kept: entries with sequence >= 1 are still needed
    ns.expire(4)
    Cleaner(ns, grace_ms=0).run_once()
    reopened = open_ns()
    assert reopened.steps() == range(4, 4)
    assert reopened.info.first_indexed_step() == 1  # step 1 holds kept's sequence 1
    assert reopened.store.open_region(0).low_watermark() == 1  # kept's sequence 1, step 1
    assert reopened.store.open_region(1).low_watermark() == 1  # whole steps are kept
    reopened.tables.mark_deleted("kept", 4)
    Cleaner(reopened, grace_ms=0).run_once()
    assert reopened.info.first_indexed_step() == 4
    with pytest.raises(RoutingError, match="past the next sequence 4 of the table in region 0"):
        reopened.tables.mark_deleted("kept", 9)


def clean_around_slow_attempt(ns: Namespace, grace_ms: float):
    """An attempt writes, another step commits and expires, the cleaner runs: the slow one."""
    slow = ns.begin("slow", 0)
    slow.write("t", rows("slow", 3))
    slow.receipt()  # its entries durable (a task's), committed later
    write_step(ns, "w", 0, {"t": rows("fast", 3)})
    ns.expire(1)
    Cleaner(ns, grace_ms=grace_ms).run_once()
    return slow


def test_attempt_older_than_cleaning_cannot_commit(open_ns):
    """This tests that an attempt whose entries were cleaned fails to commit with AttemptLost."""
    slow = clean_around_slow_attempt(open_ns(), grace_ms=0)
    with pytest.raises(AttemptLost, match="write the step again"):
        slow.commit()


def test_grace_period_keeps_in_flight_attempts(open_ns):
    """This tests that the cleaner's grace period keeps recent uncommitted entries for their commit."""
    ns = open_ns()
    slow = clean_around_slow_attempt(ns, grace_ms=60_000)
    assert slow.commit() == 1
    assert ns.read_step_table(1).column("tag").to_pylist() == ["slow-0", "slow-1", "slow-2"]


def test_endpoints(open_ns):
    """This tests the seed's endpoint API: start_step rewrite, push, commit, read, commit, expire."""
    ns = open_ns()
    out = OutputEndpoint(ns, "job-1", table="t")
    out.start_step(0)
    out.push_buffer(rows("first-try", 3))
    out.start_step(0)  # written again: what the first try wrote is discarded
    out.push_buffer(rows("zero", 2))
    assert out.commit_step() == 0
    out.start_step(1)
    out.push_buffer(rows("one", 1))
    assert out.commit_step() == 1
    out.start_step(1)  # already committed: a no-op
    assert out.push_buffer(rows("dup", 9)) == 0
    assert out.commit_step() == 1

    got: list[str] = []

    class Consumer:
        def push(self, batch):
            got.extend(t for b in batch.batches for t in b.column("tag").to_pylist())

        def eoi(self):
            got.append("<eoi>")

    inp = DurableInputEndpoint(open_ns(), reader_id="r1")
    assert inp.steps() == range(0, 2)
    for step in inp.steps():
        inp.read(step, Consumer())
    assert got == ["zero-0", "zero-1", "<eoi>", "one-0", "<eoi>"]
    inp.commit(1)
    assert DurableInputEndpoint(open_ns(), reader_id="r1").committed() == 1
    inp.expire(1)
    assert inp.steps() == range(1, 2)


STEP_SIZES = [10, 0, 20, 0, 50]


def _fill(ns: Namespace) -> None:
    for ws, n in enumerate(STEP_SIZES):
        write_step(ns, "w", ws, {"t": rows(f"s{ws}", n)})


def _read(ns: Namespace, start: int, stop: int) -> list[tuple[int, str, int]]:
    return [(sb.step, tag, sb.sequence_num)
            for step in range(start, stop) for sb in ns.read_step(step)
            for b in sb.batches for tag in b.column("tag").to_pylist()]


def test_exhaustive_recovery(make_store, store_config):
    """This tests that every (snapshot point, seek, replay count, extend) reads what a straight read does."""
    backend, options = store_config
    # a remote log opens slower: the first, a middle and the last snapshot point; the
    # pure-Python Kafka client (its open is the slowest) the middle one only, since the
    # recovery above the log is the same whichever client reads
    points = range(len(STEP_SIZES) + 1) if backend not in ("kafka", "s3") else [0, 2, 5]
    if options.get("client") == "kafka-python":
        points = [2]
    for snap in points:
        store = make_store(f"{make_store().namespace}-p{snap}")
        ns = Namespace(store)
        _fill(ns)
        straight = _read(ns, 0, len(STEP_SIZES))
        ns.expire(snap)
        Cleaner(ns, grace_ms=0).run_once()
        extension = 0
        for seek in range(snap, len(STEP_SIZES) + 1):
            for replay in range(len(STEP_SIZES) - seek + 1):
                reader = Namespace(make_store(store.namespace))  # recovers: snapshot + replay
                got = _read(reader, seek, seek + replay)
                expect = [r for r in straight if seek <= r[0] < seek + replay]
                assert got == expect, (snap, seek, replay)
                extension += 1
                write_step(Namespace(make_store(store.namespace)), "ext", extension,
                           {"t": rows(f"x{extension}", 2)})
                after = reader.steps().stop
                tail = _read(reader, seek + replay, after)
                fresh = Namespace(make_store(store.namespace))
                assert tail == _read(fresh, seek + replay, after), (snap, seek, replay)
                if seek + replay <= len(STEP_SIZES):
                    straight_tail = [r for r in straight if r[0] >= seek + replay]
                    assert tail[: len(straight_tail)] == straight_tail


def test_attempt_hands_entries_over_and_receipt_waits_for_durability(open_ns, monkeypatch):
    """This tests that ``Attempt.write`` returns before its entries are durable (a write's
    entries are handed to the log once the next write starts), that a commit waits for
    them, and that an append that fails after ``write`` returned surfaces as the log's
    typed error at commit, with no step committed."""
    from concurrent.futures import Future

    from pyspark_durable.errors import BackendUnavailable

    ns = open_ns()
    region = ns.store.open_region(0)
    handed: list[tuple[list, Future]] = []
    real_append = region.append_async

    def deferred(records):  # the log accepts the records but is not done yet
        fut: Future = Future()
        handed.append((records, fut))
        return fut

    def finish_all():
        for records, fut in handed:
            if not fut.done():
                fut.set_result(real_append(records).result())

    monkeypatch.setattr(region, "append_async", deferred)
    ok = ns.begin("w", 0)
    ok.write("t", rows("ok", 30))
    ok.write("t", rows("ok", 10, start=30))
    assert len(handed) == 1 and not handed[0][1].done()
    # the log finishes in the background: the commit sees the offsets it acknowledged
    threading.Timer(0.05, finish_all).start()
    assert ok.commit() == 0
    assert len(handed) == 2  # the last write's, handed over behind the first's
    assert ids(ns.read_step_table(0)) == list(range(40))

    bad = ns.begin("w", 1)
    bad.write("t", rows("bad", 5))
    bad.write("t", rows("bad", 5, start=5))
    handed[2][1].set_exception(BackendUnavailable("disk went away", namespace=ns.name))
    with pytest.raises(BackendUnavailable, match="disk went away"):
        bad.commit()  # the first append's failure: the second's is not waited for
    finish_all()  # the second append, handed over at the receipt, lands uncommitted
    assert ns.steps() == range(0, 1) and ns.committed_step("w", 1) is None


def test_a_lone_write_is_appended_by_the_committing_thread(open_ns, monkeypatch):
    """This tests that an attempt whose write is all it has (a small commit) appends its
    entries on the committing thread at the receipt, with no hand-over to the log's
    writer thread, and that the step reads back whole."""
    ns = open_ns()
    region = ns.store.open_region(0)
    threads = []
    real_append = region.append

    def append(records):
        threads.append(threading.current_thread())
        return real_append(records)

    def handed_over(records):
        raise AssertionError("a lone write was handed over to the writer thread")

    monkeypatch.setattr(region, "append", append)
    monkeypatch.setattr(region, "append_async", handed_over)
    attempt = ns.begin("w", 0)
    attempt.write("t", rows("one", 12))
    assert threads == []  # held until the receipt
    assert attempt.commit() == 0
    assert threads == [threading.current_thread()]
    assert ids(ns.read_step_table(0)) == list(range(12))


def test_attempt_bounds_the_bytes_in_flight(open_ns, monkeypatch):
    """This tests that an attempt waits for its oldest entries once more than
    INFLIGHT_BYTES_MAX are in flight, so a fast producer cannot fill memory, and that
    every entry still reads back in order."""
    import pyspark_durable.wal.attempt as attempt_module

    monkeypatch.setattr(attempt_module, "INFLIGHT_BYTES_MAX", 1)
    ns = open_ns()
    a = ns.begin("w", 0)
    for i in range(6):
        a.write("t", rows("b", 10, start=10 * i))
        # the last write's entries are held, the one before is in flight: older ones
        # were waited for
        assert len(a._inflight) == min(i, 1) and a._held is not None
    a.commit()
    assert ids(ns.read_step_table(0)) == list(range(60))


def test_retention_policy_is_kept_and_applied_by_any_cleaner(open_ns, monkeypatch):
    """This tests that a retention policy kept with the namespace (newest N steps, and an
    age limit) is applied by a cleaner of any handle, expiring and freeing old steps."""
    ns = open_ns()
    for ws in range(6):
        write_step(ns, "w", ws, {"t": rows(f"s{ws}", 4)})
    ns.set_retention(RetentionPolicy(max_steps=2))
    other = open_ns()
    assert other.retention() == RetentionPolicy(max_steps=2)
    report = Cleaner(other, grace_ms=0).run_once()
    assert report.expired_before == (0, 4)
    assert open_ns().steps() == range(4, 6)
    assert ns.store.open_region(0).low_watermark() == 4
    ns.set_retention(RetentionPolicy(max_age_ms=0))  # every committed step is too old
    # ... once the clock has moved on: a step committed in the pass's own millisecond is
    # 0 ms old, not older than 0 (the memory backend got there); the cleaner's clock runs
    # 2 ms ahead instead of the test waiting for the real one
    now = time.time
    monkeypatch.setattr(cleaner_module, "time", types.SimpleNamespace(time=lambda: now() + 0.002))
    Cleaner(open_ns(), grace_ms=0).run_once()
    assert open_ns().steps() == range(6, 6)
    with pytest.raises(ConfigError, match="max_steps=-1"):
        RetentionPolicy(max_steps=-1)


def test_holding_reader_keeps_steps_until_it_commits_them(open_ns):
    """This tests that a reader registered with hold keeps every step it has not committed
    from the retention policy, that a reader without hold does not, and that its
    position survives reopen, cleaning and a dropped holder."""
    ns = open_ns()
    for ws in range(5):
        write_step(ns, "w", ws, {"t": rows(f"s{ws}", 2)})
    ns.set_retention(RetentionPolicy(max_steps=1))
    holder = DurableInputEndpoint(open_ns(), reader_id="slow", hold_retention=True)
    DurableInputEndpoint(open_ns(), reader_id="free").commit(0)
    holder.commit(1)  # read steps 0 and 1: needs 2 onwards
    Cleaner(open_ns(), grace_ms=0).run_once()
    assert open_ns().steps() == range(2, 5)
    assert DurableInputEndpoint(open_ns(), reader_id="slow").committed() == 1
    holder.commit(3)
    Cleaner(open_ns(), grace_ms=0).run_once()
    assert open_ns().steps() == range(4, 5)
    open_ns().drop_reader("slow")
    write_step(ns, "w", 5, {"t": rows("s5", 2)})
    Cleaner(open_ns(), grace_ms=0).run_once()
    assert open_ns().steps() == range(5, 6)
    assert DurableInputEndpoint(open_ns(), reader_id="free").committed() == 0


@pytest.mark.parametrize("call, message", [
    (lambda ns: ns.begin("", 0), "writer id '' is not a non-empty string"),
    (lambda ns: ns.begin(None, 0), "writer id None is not a non-empty string"),
    (lambda ns: write_step(ns, "odd", "abc", {"t": rows("x", 1)}),
     "writer=odd: writer step 'abc' is not an integer >= 0"),
    (lambda ns: write_step(ns, "odd", -1, {"t": rows("x", 1)}), "writer step -1 is not"),
    (lambda ns: write_step(ns, "odd", True, {"t": rows("x", 1)}), "writer step True is not"),
    (lambda ns: ns.expire(-3), "expire step -3 is not an integer >= 0"),
    (lambda ns: ns.tables.mark_deleted("t", -4), "sequence -4 is not an integer >= 0"),
    (lambda ns: DurableInputEndpoint(ns).commit(-1), "step -1 is not an integer >= 0"),
    (lambda ns: ns.commit_reader("", 0), "reader id '' is not a non-empty string"),
])
def test_writer_and_step_arguments_are_validated(open_ns, call, message):
    """This tests that bad writer ids, writer steps and step arguments are typed errors
    naming the value, and that the namespace stays readable and cleanable after them."""
    ns = open_ns()
    write_step(ns, "w", 0, {"t": rows("ok", 1)})
    with pytest.raises(ConfigError, match=re.escape(message)):
        call(ns)
    ns.expire(1)
    Cleaner(ns, grace_ms=0).run_once()
    assert open_ns().steps() == range(1, 1)


def test_namespace_created_by_many_handles_at_once_has_one_incarnation(make_store):
    """This tests that handles creating one namespace at the same moment (Spark tasks do)
    agree on the first creator's incarnation, write into it, and read it back."""
    barrier = threading.Barrier(4)
    handles: list[Namespace] = []
    errors: list[BaseException] = []

    def create() -> None:
        try:
            store = make_store()
            barrier.wait()
            handles.append(Namespace(store))
        except BaseException as exc:  # noqa: BLE001 - collected, asserted below
            errors.append(exc)

    threads = [threading.Thread(target=create) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len({ns.info.incarnation for ns in handles}) == 1 and handles[0].info.incarnation
    for i, ns in enumerate(handles):
        write_step(ns, f"w{i}", 0, {"t": rows(f"h{i}", 2)})
    assert Namespace(make_store()).steps() == range(0, 4)
