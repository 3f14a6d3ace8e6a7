"""Filters a batch read takes over from Spark (spark/pushdown.py): which it takes, and
which steps and regions a read then plans. No JVM: the reader is planned in-process."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from pyspark_durable.log import open_store
from pyspark_durable.spark.datasource import DurableWalDataSource
from pyspark_durable.spark.pushdown import push
from pyspark_durable.spark.source import PushdownBatchReader
from pyspark_durable.wal import Namespace

NS = "push"


def test_only_comparisons_of_the_metadata_columns_with_constants_are_taken():
    """This tests that push takes =, <, <=, >, >= and IN on _step, _commit_timestamp,
    _region and _table, and hands back every other filter by reference (another
    column, a null test, a null or mistyped constant, and all of them when the read
    has no metadata columns)."""
    taken = [GreaterThan(("_step",), 1), LessThanOrEqual(("_step",), 5),
             In(("_region",), (0, 2)), EqualTo(("_table",), "a"),
             GreaterThanOrEqual(("_commit_timestamp",), dt.datetime(2026, 1, 1))]
    kept = [EqualTo(("id",), 3), IsNotNull(("_step",)), In(("_step",), (1, None)),
            EqualTo(("_region",), "0"), EqualTo(("_step",), True), LessThan(("_table",), 7)]
    pruning, rest = push([*taken, *kept], with_metadata=True)
    assert all(any(r is k for r in rest) for k in kept) and len(rest) == len(kept)
    assert set(pruning.columns) == {"_step", "_region", "_table", "_commit_timestamp"}
    assert [s for s in range(8) if pruning.admits("_step", s)] == [2, 3, 4, 5]
    assert [r for r in range(4) if pruning.admits("_region", r)] == [0, 2]
    assert pruning.admits("_table", "a") and not pruning.admits("_table", "b")
    _, rest = push(taken, with_metadata=False)
    assert rest == taken


@pytest.mark.parametrize(("filters", "steps"), [
    ([GreaterThan(("_step",), 2)], [3, 4, 5]),
    ([GreaterThanOrEqual(("_step",), 2), LessThan(("_step",), 4)], [2, 3]),
    ([EqualTo(("_step",), 4), GreaterThan(("_step",), 4)], []),
    ([In(("_step",), (0, 5, 9))], [0, 5]),
    ([LessThanOrEqual(("_step",), 1), GreaterThan(("_step",), 0)], [1]),
])
def test_step_filters_plan_exactly_the_steps_that_pass(tmp_path, filters, steps):
    """This tests that a read with filters on _step plans exactly the steps that pass
    all of them (and a contradiction plans nothing)."""
    assert planned(tmp_path, filters) == {(r, s) for s in steps for r in (0, 1)}


def test_region_table_and_time_filters_prune_regions_and_steps(tmp_path):
    """This tests that _region and _table filters plan only regions holding a table
    that passes, and that _commit_timestamp filters plan the steps committed in the
    range, compared with the commit times the WAL recorded."""
    assert planned(tmp_path, [EqualTo(("_region",), 1)]) == {(1, s) for s in range(6)}
    only_b = planned(tmp_path, [EqualTo(("_table",), "b"), LessThan(("_step",), 3)])
    assert only_b == {(1, s) for s in range(3)}  # table b lives in region 1 only
    ns = Namespace(open_store("file", NS, path=str(tmp_path)), create=False)
    stamps = [ns.step_commit(s).timestamp_ms for s in range(6)]
    ns.close()
    cut = dt.datetime.fromtimestamp(stamps[3] / 1000, dt.UTC)
    expect = {(r, s) for s in range(6) if stamps[s] >= stamps[3] for r in (0, 1)}
    assert planned(tmp_path, [GreaterThanOrEqual(("_commit_timestamp",), cut)]) == expect
    naive = cut.replace(tzinfo=None)  # a naive datetime is UTC
    assert planned(tmp_path, [GreaterThanOrEqual(("_commit_timestamp",), naive)]) == expect


def planned(root, filters) -> set[tuple[int, int]]:
    """(region, step) pairs a batch read plans under ``filters``, on a namespace of six
    steps, each with table a in regions 0 and 1 and table b in region 1."""
    if not (root / NS).exists():
        ns = Namespace(open_store("file", NS, path=str(root)))
        for step in range(6):
            attempt = ns.begin("w", step)
            for table, region in (("a", 0), ("a", 1), ("b", 1)):
                attempt.write(table, pa.table({"id": [step]}), region)
            attempt.commit()
        ns.close()
    source = DurableWalDataSource({"path": str(root), "namespace": NS, "metadataColumns": "all"})
    reader = PushdownBatchReader(source._plan(source.schema()))  # as Spark's pushing worker gets
    reader.pushFilters(filters)
    return {(p.region_id, s) for p in reader.partitions() for s in p.steps}


def test_only_spark_pushing_worker_gets_a_reader_with_push_filters(tmp_path):
    """This tests that a reader made outside Spark's filter-pushdown worker does not
    implement pushFilters (Spark refuses such a reader while its flag is off, the
    default), so reads work without the flag."""
    planned(tmp_path, [])
    source = DurableWalDataSource({"path": str(tmp_path), "namespace": NS,
                                   "metadataColumns": "all"})
    reader = source.reader(source.schema())
    assert type(reader).pushFilters is DataSourceReader.pushFilters
