"""Retention in real Spark: a writer and a reader stream continuously while cleaners run.

The writer's driver keeps the namespace's retention policy (``retentionSteps``) and
runs a cleaner pass whenever ``cleanIntervalMs`` elapsed since the last one; a
second cleaner runs in a thread of the test, so passes of two processes interleave
with commits and reads all the time. The reader holds retention (``readerId`` +
``holdRetention``), so nothing it has not read may be expired: its output must hold
every committed row exactly once, while steps, region entries and the commits log
are really cleaned behind it.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from pyspark_durable.endpoint import open_namespace, read_steps, write_step
from pyspark_durable.wal import Cleaner, RetentionPolicy
from pyspark_durable.wal.replay.stored_state import ReaderPosition
from tests.helpers import hashed_payload as payload
from tests.spark.progress_events import ProgressEvents

pytestmark = pytest.mark.spark

MIN_BATCHES = 20  # micro-batches with rows, of each query: four retention windows
RETENTION_STEPS = 5
CLEANER_PASSES = 5  # of the second cleaner, while both queries stream
# Uncommitted entries younger than this are kept. It must stay above the longest
# micro-batch (an older attempt is refused with AttemptLost and fails the writer),
# and first micro-batches take 10-40 s on a loaded 2-core machine.
GRACE_MS = 10_000
SEGMENT_BYTES = 16 * 1024  # small region segments, so cleaning deletes real files
READ_SCHEMA = ("id long, payload string, _region long, _table string, _sequence long, "
               "_step long, _commit_timestamp timestamp")
WAIT_S = 240  # per wait; the whole test needs about a minute on an idle machine


def committed_batches(checkpoint: Path) -> int:
    """Micro-batches Spark completed, from the query's checkpoint (progress events may be late)."""
    return sum(1 for f in (checkpoint / "commits").iterdir() if f.name.isdigit())


class CleanerThread:
    """A cleaner of the test's own, a pass every ``interval_s``; keeps reports and errors."""

    def __init__(self, ns, interval_s: float) -> None:
        self.cleaner = Cleaner(ns, grace_ms=GRACE_MS)
        self.interval_s = interval_s
        self.reports: list = []
        self.errors: list[BaseException] = []
        self.other_passes = 0  # seen between two of ours: the writer's driver cleaned
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="test-cleaner", daemon=True)

    def _loop(self) -> None:
        ns = self.cleaner.ns
        ns.refresh()
        last_seen = ns.info.last_clean_ms()
        while not self._stop.wait(self.interval_s):
            try:
                ns.refresh()
                if ns.info.last_clean_ms() > last_seen:
                    self.other_passes += 1
                self.reports.append(self.cleaner.run_once())
                ns.refresh()
                last_seen = ns.info.last_clean_ms()
            except Exception as exc:  # noqa: BLE001 - the test fails on it, never hidden
                self.errors.append(exc)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "the test's cleaner thread did not stop"


def test_writer_and_reader_stream_while_cleaners_run(spark, tmp_path):
    """This tests that a writer and a holding reader, 30+ micro-batches each, lose and repeat nothing
    while retention expires steps and two cleaners delete entries every second."""
    namespace = f"r{uuid.uuid4().hex[:10]}"
    path = str(tmp_path / "wal")
    out_dir = str(tmp_path / "out")
    reader_id = "copy-to-parquet"
    wal = {"namespace": namespace, "path": path, "file.segment_size_bytes": str(SEGMENT_BYTES)}
    config = {"backend": "file", "namespace": namespace,
              "options": {"path": path, "segment_size_bytes": SEGMENT_BYTES}}
    ns = open_namespace(config)
    counter = ProgressEvents()
    spark.streams.addListener(counter)
    writer = reader = cleaner = None
    try:
        rows = (spark.readStream.format("rate").option("rowsPerSecond", 100)
                .option("numPartitions", 2).load()
                .select(F.col("value").alias("id"),
                        F.concat(F.lit("row-"), F.col("value").cast("string"), F.lit("-"),
                                 F.sha1(F.col("value").cast("string"))).alias("payload")))
        # started before the writer and the table exist: so the reader is given its schema
        reader = (spark.readStream.format("durablewal").schema(READ_SCHEMA).options(**wal)
                  .option("readerId", reader_id).option("holdRetention", "true").load()
                  .writeStream.format("parquet")
                  .option("checkpointLocation", str(tmp_path / "ckpt-reader"))
                  .queryName("wal-to-parquet").trigger(processingTime="500 milliseconds")
                  .start(out_dir))
        # the reader registers (and holds from step 0) at its first trigger, not at
        # start(): under load the writer could commit and expire steps before it
        reader.processAllAvailable()
        ns.refresh()
        assert ns.info.reader_position(reader_id) == ReaderPosition(0, True)
        writer = (rows.writeStream.format("durablewal").options(**wal)
                  .option("retentionSteps", RETENTION_STEPS).option("cleanIntervalMs", 1000)
                  .option("cleanGraceMs", GRACE_MS)
                  .option("checkpointLocation", str(tmp_path / "ckpt-writer"))
                  .queryName("rate-to-wal")  # Spark hands the name to the sink as an option
                  .trigger(processingTime="500 milliseconds").start())
        both = [writer, reader]

        # Phase 1: the writer's driver alone keeps retention. After its 8th micro-batch
        # the reader holds from step >= 7; four writer micro-batches that start later
        # span more than cleanIntervalMs, so the driver made a pass that expired steps.
        counter.wait_until(both, lambda: counter.batches_of(writer) >= 12 and
                           counter.batches_of(reader) >= 8, "12 writer and 8 reader batches")
        mark = time.time() * 1000
        counter.wait_until(both, lambda: counter.batches_of(writer, since_ms=mark) >= 4,
                           "4 more writer batches")
        assert ns.retention() == RetentionPolicy(max_steps=RETENTION_STEPS)
        expired_by_driver = ns.steps().start
        assert expired_by_driver > 0, f"the writer's driver expired no step: {ns.steps()}"

        # Phase 2: a second cleaner, in this process, every second as well
        cleaner = CleanerThread(open_namespace(config), interval_s=1.0)
        cleaner.start()
        counter.wait_until(both, lambda: counter.batches_of(writer) >= MIN_BATCHES and
                           counter.batches_of(reader) >= MIN_BATCHES and
                           len(cleaner.reports) >= CLEANER_PASSES,
                           f"{MIN_BATCHES} batches of each query and {CLEANER_PASSES} passes "
                           "of the second cleaner")
        for q in both:
            assert q.isActive and q.exception() is None, (q.name, q.exception())

        writer.stop()
        assert writer.exception() is None
        reader.processAllAvailable()  # every committed step, the last ones included
        assert reader.isActive and reader.exception() is None, reader.exception()
        reader.stop()
        assert reader.exception() is None
        cleaner.stop()
        assert cleaner.errors == [], cleaner.errors

        # what the writer committed: ids 0..last, in step order (the rate source counts up)
        steps = ns.steps()
        assert steps.stop >= MIN_BATCHES  # one step per writer micro-batch with rows
        last = read_steps(ns, "default", start=steps.stop - 1)
        expected = max(last.column("id").to_pylist()) + 1
        got = spark.read.parquet(out_dir).select("id", "payload", "_step").collect()
        ids = sorted(r.id for r in got)
        assert len(ids) == len(set(ids)), f"{len(ids) - len(set(ids))} duplicated rows"
        assert ids == list(range(expected)), \
            f"lost rows: {sorted(set(range(expected)) - set(ids))[:20]}"
        assert all(r.payload == payload(r.id) for r in got), "a payload does not match its id"
        by_step: dict[int, list[int]] = {}
        for r in got:
            by_step.setdefault(r._step, []).append(r.id)
        assert sorted(by_step) == list(range(steps.stop)), "a committed step was not read"
        bounds = [(min(v), max(v)) for _, v in sorted(by_step.items())]
        assert all(hi + 1 == nxt_lo for (_, hi), (nxt_lo, _) in itertools.pairwise(bounds)), \
            "steps do not hold consecutive id ranges in step order"

        # cleaning really happened: steps expired, entries and commit records deleted
        region = ns.store.open_region(0)
        commits = ns.store.open_log("commits")
        ns.refresh()
        reader_batches = committed_batches(tmp_path / "ckpt-reader")
        print(f"\nwriter: {committed_batches(tmp_path / 'ckpt-writer')} micro-batches, "
              f"{steps.stop} steps, {expected} rows; reader: {reader_batches} micro-batches, "
              f"{len(ids)} rows; steps left {steps} (driver alone had expired "
              f"{expired_by_driver}); test cleaner {len(cleaner.reports)} passes, driver "
              f"passes between them {cleaner.other_passes}, freed "
              f"{sum(r.freed_entries for r in cleaner.reports)} entries; region 0 "
              f"[{region.low_watermark()}, {region.high_watermark()}), commits "
              f"[{commits.low_watermark()}, {commits.high_watermark()}); reader "
              f"{ns.info.readers()[reader_id]}")
        assert reader_batches >= MIN_BATCHES
        assert steps.start > expired_by_driver
        assert region.low_watermark() > 0
        assert commits.low_watermark() > 0
        assert len(cleaner.reports) >= CLEANER_PASSES
        segments = tmp_path / "wal" / namespace / "region_0"
        assert not (segments / f"{0:020d}.seg").exists(), "no region segment file was deleted"
    finally:
        for q in (writer, reader):
            if q is not None and q.isActive:
                q.stop()
        if cleaner is not None:
            cleaner.stop()
        spark.streams.removeListener(counter)


def stream_read(spark, opts: dict, out_dir: str, ckpt: str):
    """One availableNow run of a durablewal -> parquet query; returns the stopped query."""
    q = (spark.readStream.format("durablewal").options(**opts)
         .option("metadataColumns", "_step").load().select("id", "_step")
         .writeStream.format("parquet").option("checkpointLocation", ckpt)
         .trigger(availableNow=True).start(out_dir))
    try:
        q.awaitTermination()
    except PySparkException:
        pass  # the caller looks at q.exception()
    return q


def test_reader_behind_retention_fails_with_the_available_range(spark, tmp_path):
    """This tests that readers behind the retention policy, batch or stream (no hold), fail naming
    the available steps, or skip the expired ones with failOnDataLoss=false."""
    namespace = f"r{uuid.uuid4().hex[:10]}"
    path = str(tmp_path / "wal")
    ns = open_namespace({"backend": "file", "namespace": namespace, "options": {"path": path}})
    opts = {"namespace": namespace, "path": path}
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    for i in range(3):
        write_step(ns, "w", i, {"t": [{"id": i}]})
    assert stream_read(spark, {**opts, "readerId": "late"}, out, ckpt).exception() is None
    for i in range(3, 10):
        write_step(ns, "w", i, {"t": [{"id": i}]})
    ns.set_retention(RetentionPolicy(max_steps=3))
    report = Cleaner(ns, grace_ms=0).run_once()
    assert report.expired_before == (0, 7) and ns.steps() == range(7, 10)
    assert ns.store.open_region(0).low_watermark() == 7

    def batch(**extra):
        return (spark.read.format("durablewal").options(**opts).option("startingStep", 0)
                .option("metadataColumns", "_step").options(**extra).load())

    with pytest.raises(PySparkException, match=r"step 0 was expired; available steps are "
                                                r"\[7, 10\)\. Set failOnDataLoss=false"):
        batch().collect()
    rows = batch(failOnDataLoss="false").select("id", "_step").collect()
    assert sorted((r.id, r._step) for r in rows) == [(7, 7), (8, 8), (9, 9)]

    # the stream read steps 0..2, resumes at step 3, which is gone
    again = stream_read(spark, {**opts, "readerId": "late"}, out, ckpt)
    assert again.exception() is not None
    assert "step 3 was expired; available steps are [7, 10)" in str(again.exception())
    skipped = stream_read(spark, {**opts, "readerId": "late", "failOnDataLoss": "false"}, out,
                          ckpt)
    assert skipped.exception() is None
    got = spark.read.parquet(out).collect()
    assert sorted((r.id, r._step) for r in got) == [(0, 0), (1, 1), (2, 2), (7, 7), (8, 8), (9, 9)]


def test_holding_reader_keeps_steps_it_has_not_read(spark, tmp_path):
    """This tests that a reader with holdRetention keeps every step it has not read, also when
    its query stopped after one micro-batch."""
    namespace = f"r{uuid.uuid4().hex[:10]}"
    path = str(tmp_path / "wal")
    ns = open_namespace({"backend": "file", "namespace": namespace, "options": {"path": path}})
    opts = {"namespace": namespace, "path": path, "readerId": "holder", "holdRetention": "true"}
    out, ckpt = str(tmp_path / "out"), str(tmp_path / "ckpt")
    for i in range(3):
        write_step(ns, "w", i, {"t": [{"id": i}]})
    assert stream_read(spark, opts, out, ckpt).exception() is None  # read steps 0..2
    for i in range(3, 10):
        write_step(ns, "w", i, {"t": [{"id": i}]})
    ns.set_retention(RetentionPolicy(max_steps=3))
    Cleaner(ns, grace_ms=0).run_once()
    assert ns.steps().start <= 3, (
        f"steps {ns.steps()} are left although reader 'holder' has not read step 3; "
        f"readers recorded: {dict(ns.info.readers())}")
    again = stream_read(spark, opts, out, ckpt)
    assert again.exception() is None, again.exception()
    assert sorted(r.id for r in spark.read.parquet(out).collect()) == list(range(10))
