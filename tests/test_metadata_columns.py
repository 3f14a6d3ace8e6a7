"""The metadata columns are one definition, whatever reads the rows."""

from __future__ import annotations

import pyarrow as pa

from pyspark_durable.endpoint.api import read_steps, write_step
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.metadata import METADATA_FIELDS


def test_python_api_rows_carry_the_one_set_of_metadata_columns(tmp_path):
    """This tests that the Python API's rows, and its empty result, end with the metadata
    columns of wal/metadata.py in their names, order and types, with the row's region,
    table, sequence, step and commit time."""
    ns = Namespace(open_store("file", "m", path=str(tmp_path)))
    write_step(ns, "w", 0, {"t": [{"id": 1}, {"id": 2}]}, region_id=4)
    rows = read_steps(ns, "t")
    assert list(rows.schema)[1:] == list(METADATA_FIELDS)
    commit = ns.step_commit(0)
    assert rows.drop_columns(["_commit_timestamp"]).to_pylist() == [
        {"id": 1, "_region": 4, "_table": "t", "_sequence": 0, "_step": 0},
        {"id": 2, "_region": 4, "_table": "t", "_sequence": 0, "_step": 0}]
    stamps = rows.column("_commit_timestamp").cast(pa.int64()).to_pylist()
    assert stamps == [commit.timestamp_ms * 1000] * 2
    empty = read_steps(ns, "t", start=1)
    assert empty.num_rows == 0 and list(empty.schema)[1:] == list(METADATA_FIELDS)
    ns.close()
