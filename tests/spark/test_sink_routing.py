"""The sink's routing of a batch's rows to (region, table) groups, without Spark."""

from __future__ import annotations

import random

import pyarrow as pa

from pyspark_durable.spark.sink import route


def test_routing_keeps_every_row_once_in_its_group_in_order():
    """This tests that routing hands every row to exactly its (region, table) group, each
    group's rows in their original order, for a shuffled mix of groups (string and id
    tables), a single group and a single row."""
    rng = random.Random(7)
    for n, groups in ((1, 1), (500, 1), (1000, 7), (2000, 40)):
        pairs = [(rng.randrange(5), rng.choice(["a", "b", "c,d", " e"])) for _ in range(groups)]
        rows = [pairs[rng.randrange(groups)] for _ in range(n)]
        keys = pa.table({"r": pa.array([r for r, _ in rows], pa.int64()),
                         "t": pa.array([t for _, t in rows], pa.string())})
        payload = pa.record_batch({"i": pa.array(range(n), pa.int64())})
        got: dict[tuple[int, str], list[int]] = {}
        for region, table, part in route(keys, payload):
            assert (region, table) not in got, f"group {(region, table)} handed twice"
            got[(region, table)] = part.column("i").to_pylist()
        want: dict[tuple[int, str], list[int]] = {}
        for i, pair in enumerate(rows):
            want.setdefault(pair, []).append(i)
        assert got == want
    ids = pa.table({"r": pa.array([0, 1, 0], pa.int64()), "t": pa.array([7, 7, 9], pa.uint64())})
    parts = {(r, t): p.num_rows for r, t, p in route(ids, pa.record_batch({"x": [1, 2, 3]}))}
    assert parts == {(0, 7): 1, (1, 7): 1, (0, 9): 1}
