"""docs/recipes.md's code runs as written, and its foreachBatch recipe writes each
micro-batch exactly once to two WAL tables (one step) and to a folder of files, however
often a batch is replayed."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pyspark_durable.endpoint import open_namespace, read_steps

ROOT = Path(__file__).parent.parent.parent
RECIPES = (ROOT / "docs" / "recipes.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", RECIPES, flags=re.S)

pytestmark = pytest.mark.spark

ORDERS = Counter((n * 4 + i, f"c{i % 2}", 10.0 * n + i) for n in range(3) for i in range(4))


def run_blocks(tmp_path: Path) -> dict:
    """The recipe's blocks in one namespace, paths moved to ``tmp_path``: their globals."""
    code = "\n".join(BLOCKS).replace("/tmp/recipe/", f"{tmp_path}/")
    scope: dict = {"__name__": "recipes"}
    exec(compile(code, "docs/recipes.md", "exec"), scope)
    return scope


def assert_once(tmp_path: Path, wal: dict) -> None:
    """Every order once in 'orders' and once in the exported files, one audit row per
    batch, one step per batch."""
    ns = open_namespace(wal)
    try:
        orders = read_steps(ns, "orders").to_pylist()
        audit = read_steps(ns, "audit", with_metadata=False).to_pylist()
        assert list(ns.steps()) == [0, 1, 2]
    finally:
        ns.close()
    assert Counter((r["order_id"], r["customer"], r["amount"]) for r in orders) == ORDERS
    assert sorted(r["batch_id"] for r in audit) == [0, 1, 2]
    assert sum(r["orders"] for r in audit) == 12
    # one step holds a batch's orders and its audit row
    assert {r["_step"] for r in orders} == {0, 1, 2}
    export = tmp_path / "export"
    assert sorted(p.name for p in export.iterdir()) == [
        f"batch-{b:012d}.parquet" for b in range(3)]  # no temporary file left
    files = pq.read_table(export).to_pylist()
    assert Counter((r["order_id"], r["customer"], r["amount"]) for r in files) == ORDERS


def test_recipe_writes_each_batch_once_however_often_replayed(spark, tmp_path, capsys):
    """This tests that docs/recipes.md's blocks run as written and print what the page
    says; that calling the foreachBatch function again with batchIds it wrote (the
    same rows, as a replay brings them) adds nothing; and that the query run again
    after its last batch was left uncommitted in the checkpoint (as a driver killed
    between the batch's writes and Spark's commit of it leaves it) replays that batch
    with its batchId and adds nothing either."""
    scope = run_blocks(tmp_path)
    printed = capsys.readouterr().out
    shown = re.findall(r"It prints.*?```\n(.*?)```", RECIPES, flags=re.S)[0]
    assert printed.strip() == shown.strip().replace("/tmp/recipe/", f"{tmp_path}/")
    wal = scope["wal"]
    assert_once(tmp_path, wal)

    schema = "order_id long, customer string, amount double"
    for batch_id, part in ((1, 1), (0, 0), (2, 2)):
        df = spark.read.schema(schema).json(str(tmp_path / "in" / f"part-{part}.json"))
        scope["write_batch"](df, batch_id)
    assert_once(tmp_path, wal)

    checkpoint = tmp_path / "checkpoint"
    (checkpoint / "commits" / "2").unlink()  # batch 2 ran, Spark never recorded it
    for crc in (checkpoint / "commits").glob(".2.crc"):
        crc.unlink()
    replayed: list[int] = []

    def spy(df, batch_id: int) -> None:
        replayed.append(batch_id)
        scope["write_batch"](df, batch_id)

    query = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1)
             .json(str(tmp_path / "in")).writeStream.foreachBatch(spy)
             .option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    assert replayed == [2]
    assert_once(tmp_path, wal)
