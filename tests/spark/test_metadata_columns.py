"""The metadata columns are one definition, whatever reads the rows."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_durable.endpoint.api import read_steps, write_step
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.metadata import METADATA_FIELDS


def test_python_api_rows_carry_the_one_set_of_metadata_columns(tmp_path):
    """This tests that the Python API's rows, and its empty result, end with the metadata
    columns of wal/metadata.py in their names, order and types, with the row's region,
    table, sequence, step, commit time and position in its entry."""
    ns = Namespace(open_store("file", "m", path=str(tmp_path)))
    write_step(ns, "w", 0, {"t": [{"id": 1}, {"id": 2}]}, region_id=4)
    rows = read_steps(ns, "t")
    assert list(rows.schema)[1:] == list(METADATA_FIELDS)
    commit = ns.step_commit(0)
    assert rows.drop_columns(["_commit_timestamp"]).to_pylist() == [
        {"id": 1, "_region": 4, "_table": "t", "_sequence": 0, "_step": 0, "_row": 0,
         "_event_time_min": None, "_event_time_max": None},
        {"id": 2, "_region": 4, "_table": "t", "_sequence": 0, "_step": 0, "_row": 1,
         "_event_time_min": None, "_event_time_max": None}]
    stamps = rows.column("_commit_timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [commit.timestamp_ms * 1000] * 2
    empty = read_steps(ns, "t", start=1)
    assert empty.num_rows == 0 and list(empty.schema)[1:] == list(METADATA_FIELDS)
    ns.close()


def test_row_key_names_each_row_once_and_again_on_every_read(tmp_path):
    """This tests that (_region, _table, _sequence, _row) is unique over a step whose
    table spans two regions and is split into many entries, that _row counts each
    entry's rows from 0, and that a second read (a new handle, as after a restart)
    gives every row the same key."""
    ns = Namespace(open_store("file", "k", path=str(tmp_path)), entry_max_bytes=2_000)
    attempt = ns.begin("w", 0)
    for region in (0, 1):
        attempt.write("t", pa.table({"id": pa.array(range(region * 1000, region * 1000 + 1000),
                                                    pa.int64())}), region)
    attempt.commit()
    key = ["_region", "_table", "_sequence", "_row"]
    rows = read_steps(ns, "t").select(["id", *key]).to_pylist()
    keys = {r["id"]: tuple(r[k] for k in key) for r in rows}
    assert len(rows) == 2000 and len(set(keys.values())) == 2000
    per_entry: dict[tuple, list[int]] = {}
    for r in rows:
        per_entry.setdefault((r["_region"], r["_sequence"]), []).append(r["_row"])
    assert len(per_entry) > 2  # the step's rows span several entries per region
    assert all(v == list(range(len(v))) for v in per_entry.values())
    ns.close()
    again = Namespace(open_store("file", "k", path=str(tmp_path)), create=False)
    assert {r["id"]: tuple(r[k] for k in key)
            for r in read_steps(again, "t").select(["id", *key]).to_pylist()} == keys
    again.close()


def test_a_read_schema_naming_some_metadata_columns_reads_those(tmp_path):
    """This tests that a reader's schema naming the payload and only some metadata
    columns (as a schema written before `_row` existed does) reads exactly those, in
    its order, and that a name that is neither is refused."""
    from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

    types = {"id": LongType(), "_region": LongType(), "_table": StringType(),
             "_sequence": LongType(), "_step": LongType(), "_row": LongType(),
             "_commit_timestamp": TimestampType(), "nope": LongType()}

    def of(*names: str) -> StructType:
        return StructType([StructField(n, types[n]) for n in names])

    from pyspark_durable.errors import SchemaMismatch
    from pyspark_durable.spark.datasource import DurableWalDataSource

    ns = Namespace(open_store("file", "m", path=str(tmp_path)))
    write_step(ns, "w", 0, {"t": [{"id": 1}, {"id": 2}]}, region_id=4)
    ns.close()
    source = DurableWalDataSource({"path": str(tmp_path), "namespace": "m"})
    old = of("id", "_region", "_table", "_sequence", "_step", "_commit_timestamp")
    some = of("id", "_step", "_row")
    for schema in (old, some):
        reader = source.reader(schema)
        got = [b for p in reader.partitions() for b in reader.read(p)]
        assert [b.schema.names for b in got] == [schema.names]
    assert [r for b in got for r in b.to_pylist()] == [
        {"id": 1, "_step": 0, "_row": 0}, {"id": 2, "_step": 0, "_row": 1}]
    with pytest.raises(SchemaMismatch, match="does not match"):
        source.reader(of("id", "_step", "nope"))


def test_a_read_carries_metadata_columns_only_when_asked(tmp_path):
    """This tests that the default read schema is the table's columns alone (each metadata
    column costs a read its transfer to the JVM), that reading it gives batches of those
    columns only, that ``metadataColumns`` adds all or some of them in their defined order
    (whatever order they are named in, any case of none/all), and that a name that is no
    metadata column fails naming it, the closest one and the valid ones."""
    from pyspark_durable.errors import ConfigError
    from pyspark_durable.spark.datasource import DurableWalDataSource

    ns = Namespace(open_store("file", "m", path=str(tmp_path)))
    write_step(ns, "w", 0, {"t": [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]})
    ns.close()

    def source(**extra: str) -> DurableWalDataSource:
        return DurableWalDataSource({"path": str(tmp_path), "namespace": "m", **extra})

    default = source()
    assert default.schema().fieldNames() == ["id", "v"]
    reader = default.reader(default.schema())
    got = [b for p in reader.partitions() for b in reader.read(p)]
    assert [r for b in got for r in b.to_pylist()] == [{"id": 1, "v": "a"}, {"id": 2, "v": "b"}]
    assert source(metadataColumns="None").schema().fieldNames() == ["id", "v"]
    assert source(metadataColumns="ALL").schema().fieldNames() == [
        "id", "v", *(f.name for f in METADATA_FIELDS)]
    picked = source(metadataColumns=" _commit_timestamp, _step ")
    assert picked.schema().fieldNames() == ["id", "v", "_step", "_commit_timestamp"]
    reader = picked.reader(picked.schema())
    rows = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert [(r["id"], r["_step"]) for r in rows] == [(1, 0), (2, 0)]
    with pytest.raises(ConfigError, match=r"option metadataColumns='_step,_stpe': '_stpe' is no "
                                          r"metadata column; did you mean '_step'\? \(give "
                                          r"none, all, or a comma list of _region, _table"):
        source(metadataColumns="_step,_stpe")


@pytest.mark.parametrize("keys", [1024, 2])
def test_each_row_gets_its_own_entrys_metadata_whatever_was_read_before(tmp_path, monkeypatch,
                                                                       keys):
    """This tests that the metadata columns shared by a step's rows (built once per
    value and reused) name each row's own step, region, table and commit time, over
    steps of growing and shrinking entries in two regions and two tables, read twice
    in different orders; also when the reader keeps only 2 of those values at a time
    (``keys=2``)."""
    from pyspark_durable.wal import metadata

    monkeypatch.setattr(metadata, "CONSTANTS_MAX_KEYS", keys)
    ns = Namespace(open_store("file", "c", path=str(tmp_path)), entry_max_bytes=4_000)
    sizes = [3, 5_000, 2, 20_000, 1]
    where: dict[int, tuple[int, int, str]] = {}  # id -> (step, region, table)
    first = 0
    for step, size in enumerate(sizes):
        attempt = ns.begin("w", step)
        for region, table in ((step % 2, "a"), (1 - step % 2, "b")):
            ids = range(first, first + size)
            attempt.write(table, pa.table({"id": pa.array(ids, pa.int64())}), region)
            where.update({i: (step, region, table) for i in ids})
            first += size
        attempt.commit()
    stamps = {s: ns.step_commit(s).timestamp_ms * 1000 for s in range(len(sizes))}

    def check(rows: pa.Table, table: str, steps: range) -> None:
        got = rows.select(["id", "_step", "_region", "_table"]).to_pylist()
        assert {r["id"]: (r["_step"], r["_region"], r["_table"]) for r in got} == \
            {i: w for i, w in where.items() if w[2] == table and w[0] in steps}
        commit = rows.column("_commit_timestamp").cast(pa.int64()).to_pylist()
        assert commit == [stamps[s] for s in rows.column("_step").to_pylist()]
        assert rows.column("_event_time_min").null_count == rows.num_rows

    for table in ("a", "b"):
        check(read_steps(ns, table), table, range(len(sizes)))
    for step in reversed(range(len(sizes))):  # small after large, other values between
        for table in ("b", "a"):
            check(read_steps(ns, table, start=step, end=step + 1), table, range(step, step + 1))
    ns.close()
