"""Table names and read positions through format("durablewal"): a name that looks like a
number stays a name, every name a writer can create can be selected, and every
impossible position is a typed error naming what was asked and what exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.errors import PySparkException
from pyspark.sql import functions as F

from pyspark_durable.endpoint import open_namespace
from tests.spark.spark_io import reader, write

pytestmark = pytest.mark.spark
NAMES = ["007", "7", "\u0667", "a,b", " c ", "c"]  # the last: a name " c " must not select


def run_stream(df, out: Path, ckpt: Path):
    """An availableNow query of ``df`` into parquet at ``out``; returns the ended query."""
    q = (df.writeStream.format("parquet").option("checkpointLocation", str(ckpt))
         .trigger(availableNow=True).start(str(out)))
    try:
        q.awaitTermination()
    except PySparkException:
        pass  # the query's exception is asserted by the caller through q.exception()
    return q


@pytest.fixture(scope="module")
def named(spark, tmp_path_factory) -> dict:
    """One step of tables named like numbers, with commas and spaces, and table id 7."""
    wal = {"path": str(tmp_path_factory.mktemp("names") / "wal"), "namespace": "names"}
    rows = [(i, name) for i, name in enumerate(NAMES)]
    write(spark.createDataFrame(rows, "id long, t string"), wal, tableColumn="t")
    by_id = spark.createDataFrame([(100, 7)], "id long, t long")  # an integer column: ids
    write(by_id, wal, tableColumn="t")
    return wal


def test_numeric_names_stay_separate_tables_with_their_names(spark, named):
    """This tests that tables named "007", "7" and an Arabic-Indic 7 are three tables
    (none of them table id 7), each read back under its own name in _table."""
    got = sorted((r.id, r._table) for r in reader(spark, named).collect())
    assert got == sorted([(i, n) for i, n in enumerate(NAMES)] + [(100, "7")])
    for i, name in enumerate(NAMES[:3]):
        one = reader(spark, named, tables=json.dumps([name])).collect()
        assert [(r.id, r._table) for r in one] == [(i, name)]
    assert [r.id for r in reader(spark, named, tables="007").collect()] == [0]


def test_any_written_name_and_an_explicit_id_are_selectable(spark, named):
    """This tests that the tables option's JSON list selects names with a comma or
    surrounding spaces exactly, and an integer selects table id 7 (a table an older
    version created from the name "7"), while the comma form keeps working."""
    exact = reader(spark, named, tables='["a,b", " c "]').collect()
    assert sorted((r.id, r._table) for r in exact) == [(3, "a,b"), (4, " c ")]
    assert [r.id for r in reader(spark, named, tables="[7]").collect()] == [100]
    plain = reader(spark, named, tables="c, 007").collect()
    assert sorted(r.id for r in plain) == [0, 5]


@pytest.mark.parametrize("tables, message", [
    ("[1.5]", r"option tables='\[1.5\]': 1.5 is neither a table name"),
    ('["a,b"', r"starts with '\[' but is not a JSON list"),
    ("[8]", r"unknown table id 8; tables: "),
])
def test_malformed_or_unknown_tables_option_is_a_typed_error(spark, named, tables, message):
    """This tests that a malformed JSON tables option or an unknown id fails the read with
    an error naming it, never reading a different selection."""
    with pytest.raises(PySparkException, match=message):
        reader(spark, named, tables=tables).collect()


def test_negative_table_id_in_table_column_is_a_typed_error(spark, tmp_path):
    """This tests that an integer tableColumn holding -1 fails the write naming the column
    and the value, writing nothing."""
    wal = {"path": str(tmp_path / "wal"), "namespace": "neg"}
    rows = spark.createDataFrame([(1, 3), (2, -1)], "id long, t long")
    with pytest.raises(PySparkException, match=r"tableColumn 't' holds -1; table ids are "):
        write(rows, wal, tableColumn="t")
    ns = open_namespace({"backend": "file", "namespace": "neg",
                         "options": {"path": wal["path"]}})
    assert ns.steps() == range(0, 0)
    ns.close()


@pytest.fixture(scope="module")
def three(spark, tmp_path_factory) -> dict:
    """Steps [0, 3) of table t, one row each."""
    wal = {"path": str(tmp_path_factory.mktemp("pos") / "wal"), "namespace": "pos", "table": "t"}
    for step in range(3):
        write(spark.range(step, step + 1), wal)
    return wal


@pytest.mark.parametrize("extra, message", [
    ({"startingStep": "5"}, r"StepNotCommitted.*option startingStep=5 is past the committed "
                            r"steps \[0, 3\): a read starts at most at the next step, 3"),
    ({"startingStep": "2", "endingStep": "1"},
     r"option startingStep=2 \(step 2\) is after endingStep=1: .*committed steps are \[0, 3\)"),
    ({"startingStep": "latest", "endingStep": "1"}, r"\(step 3\) is after endingStep=1"),
    ({"endingStep": "9"}, r"endingStep=9 is past the last committed step 2; committed steps "
                          r"are \[0, 3\)"),
    ({"startingStep": "-1"}, r"option startingStep='-1' must be >= 0"),
    ({"startingStep": "x"}, r"option startingStep='x' is not an integer"),
])
def test_impossible_batch_positions_are_typed_errors(spark, three, extra, message):
    """This tests that a batch read starting past the committed steps, after its end, ending
    past them, or at a negative or non-numeric step fails naming what was asked and the
    committed steps, instead of returning an empty DataFrame."""
    with pytest.raises(PySparkException, match=message):
        reader(spark, three, **extra).collect()


def test_batch_read_at_the_next_step_is_empty(spark, three):
    """This tests that startingStep equal to the next step (an incremental batch job with
    nothing new) reads no rows and no error."""
    assert reader(spark, three, startingStep="3").count() == 0


def test_new_stream_past_the_end_names_the_real_cause(spark, three, tmp_path):
    """This tests that a new streaming query with startingStep past the committed steps
    fails naming the option and the steps, not a WAL restored from an older copy."""
    q = run_stream(reader(spark, three, stream=True, startingStep="7"), tmp_path / "out",
                   tmp_path / "ckpt")
    text = str(q.exception())
    assert "option startingStep=7 is past the committed steps [0, 3)" in text, text
    assert "older copy" not in text


@pytest.mark.parametrize("damaged, message", [
    ('{"step": -1}', "names step -1, not a step number >= 0"),
    # not JSON: pyspark's runner decodes the offset before the source sees it, so the
    # error is its JSONDecodeError (see docs/operations.md, Known limits); nothing is re-delivered
    ("xyz", None),
])
def test_damaged_checkpoint_offset_never_redelivers(spark, tmp_path, damaged, message):
    """This tests that a checkpoint offset damaged to a negative step fails the restarted
    query with CorruptOffset even with failOnDataLoss=false (garbage text fails it too;
    the other damaged forms: tests/wal/test_names_and_positions.py), and that no step the
    checkpoint says was delivered is delivered again."""
    wal = {"path": str(tmp_path / "wal"), "namespace": "ckpt", "table": "t",
           "failOnDataLoss": "false"}
    for step in range(3):
        write(spark.range(step, step + 1), wal)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    q = run_stream(reader(spark, wal, stream=True), out, ckpt)
    assert q.exception() is None
    assert sorted(r.id for r in spark.read.parquet(str(out)).collect()) == [0, 1, 2]
    write(spark.range(3, 4), wal)  # a new step for the restart to read
    last = max(int(p.name) for p in (ckpt / "offsets").iterdir() if p.name.isdecimal())
    offsets = ckpt / "offsets" / str(last)
    lines = offsets.read_text().splitlines()  # v1, Spark's metadata, our source offset
    source = json.loads(lines[2])
    assert source["step"] == 3
    lines[2] = damaged
    offsets.write_text("\n".join(lines))
    (offsets.parent / f".{last}.crc").unlink()  # Hadoop's checksum of the old content

    q = run_stream(reader(spark, wal, stream=True), out, ckpt)
    text = str(q.exception())
    if message is None:
        assert "JSONDecodeError" in text and "Current Committed Offsets" in text, text
    else:
        assert "CorruptOffset" in text and message in text, text
        assert "the WAL has steps [0, 4)" in text, text
    ids = [r.id for r in spark.read.parquet(str(out)).select(F.col("id")).collect()]
    assert sorted(ids) == [0, 1, 2]
