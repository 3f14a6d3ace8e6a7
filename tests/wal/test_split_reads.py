"""Reads split across tasks: a region's steps cut into windows of entries.

The rule that keeps a split read exactly the whole read: a run is consecutive region
offsets, so the window [start, end) of a run is itself a run of end - start entries,
whose first sequence number is the run's plus start - run.start; every entry of a
window is checked against its step (attempt, key, table, count) as in a whole read,
and entries outside the step's runs (aborted attempts, other tables) are skipped.
"""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

from pyspark_durable.log import open_store
from pyspark_durable.spark.datasource import DurableWalDataSource
from pyspark_durable.spark.partitions import split_region
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.format.records import Run


def rows(tag: str, start: int, n: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "tag": pa.array([tag] * n, pa.string())})


def interleaved_step(ns: Namespace, step: int) -> None:
    """One committed step in region 0 whose entries (tables a and b, two attempts) lie
    between an aborted attempt's entries, written one entry at a time in turns."""
    keep1, keep2 = ns.begin("w", step, f"k1-{step}"), ns.begin("w", step, f"k2-{step}")
    lost = ns.begin("w", step, f"lost-{step}")
    for i in range(8):
        keep1.write("a", rows("a1", step * 1000 + i * 10, 10))
        lost.write("a", rows("lost", -1, 3))
        keep2.write("a" if i % 3 else "b", rows("k2", step * 1000 + 500 + i * 10, 10))
        lost.receipt()
        keep1.receipt()
        keep2.receipt()
    ns.commit("w", step, [keep1.receipt(), keep2.receipt()])


def flat(batches) -> list[tuple]:
    return [(sb.step, sb.table_id, sb.sequence_num, sb.offset, row["id"], row["tag"])
            for sb in batches for b in sb.batches for row in b.to_pylist()]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_windows_of_a_step_read_exactly_the_whole_step(make_store):
    """This tests that any cut of a region's offsets into windows, read window by
    window, gives exactly the rows, sequence numbers and offsets of the whole read, on
    a step whose two tables and two attempts lie between an aborted attempt's entries,
    and that a window holding only foreign entries reads nothing."""
    ns = Namespace(make_store())
    for step in range(2):
        interleaved_step(ns, step)
    whole = flat(ns.read_region_steps(0, [0, 1]))
    assert whole and all(r[5] != "lost" for r in whole)
    high = ns.store.open_region(0).high_watermark()
    rng = random.Random(31)
    for _ in range(12):
        cuts = sorted(rng.sample(range(1, high), rng.randint(1, 6)))
        bounds = list(zip([0, *cuts], [*cuts, high], strict=True))
        got = []
        for step in (0, 1):
            for window in bounds:
                got += flat(ns.read_region_steps(0, [step], windows=[window]))
        assert got == whole, bounds
    lost_offsets = [o for o in range(high) if o not in {r[3] for r in whole}]
    assert lost_offsets
    assert flat(ns.read_region_steps(0, [0], windows=[(lost_offsets[0],
                                                       lost_offsets[0] + 1)])) == []
    ns.close()


def test_split_region_cuts_only_steps_over_the_target():
    """This tests the planner's cut: whole steps share a task while they fit, a step
    over the target becomes windows of about target rows covering all its entries
    once, and a one-entry step is never cut."""
    small = [Run(0, 1, 0, 2, 20, 0)]
    big = [Run(0, 1, 10, 20, 100, 0), Run(0, 2, 25, 35, 100, 0)]  # 20 entries, 200 rows
    parts = split_region(0, [(0, small), (1, small), (2, big), (3, small),
                             (4, [Run(0, 1, 40, 41, 500, 0)])], target=50)
    assert [(p.steps, p.windows) for p in parts] == [
        ([0, 1], None),
        ([2], [(10, 15)]), ([2], [(15, 20)]), ([2], [(25, 30)]), ([2], [(30, 35)]),
        ([3], None), ([4], None)]


@pytest.mark.parametrize("min_partitions", [1, 3, 7])
def test_a_split_batch_read_reads_the_same_rows_and_keys(tmp_path, min_partitions):
    """This tests that a read planned with minPartitions over one big step in one
    region gets that many tasks (give or take an entry's rows), and that the tasks
    together yield exactly the rows and metadata (_sequence, _row) of one task's read."""
    ns = Namespace(open_store("file", "split", path=str(tmp_path)), entry_max_bytes=4_000)
    interleaved_step(ns, 0)
    attempt = ns.begin("big", 0)
    attempt.write("a", rows("big", 10_000, 3_000))
    attempt.commit()
    ns.close()
    one = read_all(tmp_path, {"minPartitions": "1"})
    split = read_all(tmp_path, {"minPartitions": str(min_partitions)})
    assert len(split[1]) >= min_partitions and len(one[1]) == 1
    assert sorted(split[0]) == sorted(one[0]) and len(one[0]) == 160 + 3000


def read_all(root, options: dict) -> tuple[list[tuple], list]:
    source = DurableWalDataSource({"path": str(root), "namespace": "split", "metadataColumns": "all",
                                   **options})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    got = [(r["id"], r["tag"], r["_step"], r["_sequence"], r["_row"])
           for p in parts for b in reader.read(p) for r in b.to_pylist()]
    return got, parts
