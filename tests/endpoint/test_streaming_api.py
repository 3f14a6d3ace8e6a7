"""The Python API streams: memory follows ``entry_max_bytes``, not the step.

``write_step`` takes an iterator of chunks and writes it entry by entry, and slices a
large table without copying it; ``read_batches`` yields a step entry by entry. The
bounds are measured in fresh processes (``memory_child.py``: file backend, real
fdatasync) as the peak RSS a write or read adds: each stays under a small multiple of
``entry_max_bytes``, plus what the writer keeps in flight to the log and a fixed
allowance, on a step several times larger. The same measurement of ``read_steps``
(which builds one table) sees the whole step, so the bound would catch a read or a
write that held it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, read_batches, read_steps, write_step
from pyspark_durable.errors import ConfigError, StepNotCommitted
from pyspark_durable.wal.attempt import APPEND_GROUP_BYTES, INFLIGHT_BYTES_MAX
from tests.helpers import CHILDREN, ROOT

CHILD = CHILDREN / "memory_child.py"
MiB = 1 << 20
STEP_MB = 320  # the step written and read by the bounded tests: above WRITE_LIMIT (~184 MB)
ENTRY_MAX = 2 * MiB
# what no entry count explains: the interpreter's and Arrow's own working memory, and
# freed pages Arrow's allocator (mimalloc) keeps for reuse (~60-80 MB here; ~0 with
# ARROW_DEFAULT_MEMORY_POOL=jemalloc). It does not grow with the step: 100 MB and 1 GB
# steps add the same.
ALLOWANCE = 128 * MiB
WRITE_LIMIT = INFLIGHT_BYTES_MAX + APPEND_GROUP_BYTES + 8 * ENTRY_MAX + ALLOWANCE
READ_LIMIT = 8 * ENTRY_MAX + ALLOWANCE // 2


def open_file_ns(path: Path, entry_max_bytes: int = 1024):
    ns = open_namespace({"backend": "file", "namespace": "stream",
                         "options": {"path": str(path)}})
    ns.entry_max_bytes = entry_max_bytes
    return ns


def rows(start: int, n: int) -> pa.RecordBatch:
    return pa.record_batch({"id": pa.array(range(start, start + n), pa.int64()),
                            "pad": pa.array([b"p" * 40] * n, pa.binary())})


def entries_of(ns, step: int) -> list[tuple[int, int]]:
    """(rows, bytes) of each entry run of a step."""
    return [(r.rows, r.size_bytes) for r in ns.step_commit(step).runs]


# -- what the API accepts and writes ---------------------------------------------------


def test_write_step_takes_an_iterator_of_chunks_and_gathers_them_into_entries(tmp_path):
    """This tests that a generator of small chunks of any kind (Arrow batches, tables,
    lists of mappings) is written as one step whose entries are about
    ``entry_max_bytes`` each, not one per chunk, and reads back whole and in order."""
    ns = open_file_ns(tmp_path, entry_max_bytes=4096)

    def chunks() -> Iterator[object]:
        for i in range(0, 3000, 10):
            if i % 30 == 0:
                yield rows(i, 10)
            elif i % 30 == 10:
                yield pa.Table.from_batches([rows(i, 10)])
            else:
                yield rows(i, 10).to_pylist()

    assert write_step(ns, "loader", 0, {"t": chunks()}) == 0
    back = read_steps(ns, "t")
    assert back.column("id").to_pylist() == list(range(3000))
    (run,) = ns.step_commit(0).runs
    assert run.rows == 3000
    assert 20 <= run.entries <= 40  # ~56 bytes a row: ~73 rows an entry, not 300 entries
    assert back.column("_sequence").to_pylist()[-1] == run.entries - 1


def test_a_large_table_is_written_slice_by_slice(tmp_path):
    """This tests that a table handed whole is split into entries under entry_max_bytes,
    each encoded from a slice, and reads back as it was."""
    ns = open_file_ns(tmp_path, entry_max_bytes=8192)
    table = pa.Table.from_batches([rows(0, 5000), rows(5000, 5000)])
    write_step(ns, "loader", 0, {"t": table})
    runs = ns.step_commit(0).runs
    assert sum(r.entries for r in runs) > 50
    assert max(r.size_bytes / r.entries for r in runs) < 8192 * 1.2
    assert read_steps(ns, "t", with_metadata=False).equals(table.combine_chunks())


def test_entries_stay_under_the_limit_once_conformed_to_the_table(tmp_path):
    """This tests that rows written as a wider schema version (columns they lack are
    written null) are split by the size they have as that version, not as given."""
    ns = open_file_ns(tmp_path, entry_max_bytes=8192)
    wide = {"id": pa.array([0], pa.int64()), **{f"c{i}": pa.array([0], pa.int64())
                                               for i in range(8)}}
    write_step(ns, "loader", 0, {"t": pa.table(wide)})
    write_step(ns, "loader", 1, {"t": pa.table({"id": pa.array(range(20_000), pa.int64())})})
    (run,) = ns.step_commit(1).runs
    assert run.size_bytes / run.entries < 8192 * 1.2
    assert read_steps(ns, "t", start=1).column("c7").null_count == 20_000


def test_write_step_takes_a_record_batch_reader_and_a_list_of_batches(tmp_path):
    """This tests that a ``pa.RecordBatchReader`` and a list of Arrow batches are rows
    too, as one step each."""
    ns = open_file_ns(tmp_path)
    schema = rows(0, 1).schema
    reader = pa.RecordBatchReader.from_batches(schema, (rows(i, 100) for i in range(0, 500, 100)))
    write_step(ns, "loader", 0, {"t": reader})
    write_step(ns, "loader", 1, {"t": [rows(500, 7), pa.Table.from_batches([rows(507, 3)])]})
    assert read_steps(ns, "t").column("id").to_pylist() == list(range(510))
    assert read_steps(ns, "t", start=1).column("_step").to_pylist() == [1] * 10


def test_chunks_of_new_columns_add_a_schema_version_midway(tmp_path):
    """This tests that chunks whose schema changes midway are written each as its own
    schema (with merge_schema), and that the earlier rows read the new column as null."""
    ns = open_file_ns(tmp_path)
    first = [{"id": i} for i in range(5)]
    later = [{"id": i, "name": f"n{i}"} for i in range(5, 8)]
    write_step(ns, "loader", 0, {"t": iter([first, later])}, merge_schema=True)
    back = read_steps(ns, "t", with_metadata=False)
    assert back.to_pylist() == [{"id": i, "name": None} for i in range(5)] + later


def test_a_committed_step_does_not_consume_its_iterator(tmp_path):
    """This tests that writing a committed (writer, step) again returns its step
    without reading the iterator (a replayed load does not regenerate its rows)."""
    ns = open_file_ns(tmp_path)
    write_step(ns, "loader", 0, {"t": [{"id": 1}]})

    def never() -> Iterator[pa.RecordBatch]:
        raise AssertionError("the iterator of a committed step was read")
        yield rows(0, 1)

    assert write_step(ns, "loader", 0, {"t": never()}) == 0


def test_a_bad_chunk_is_a_typed_error_and_leaves_nothing_visible(tmp_path):
    """This tests that a chunk that is not rows fails naming its index, after earlier
    chunks were written, and that none of their rows become visible."""
    ns = open_file_ns(tmp_path)
    with pytest.raises(ConfigError, match=r"chunk 2 of table 't' is a int"):
        write_step(ns, "loader", 0, {"t": iter([rows(0, 100), rows(100, 100), 7])})
    assert ns.steps() == range(0, 0)
    with pytest.raises(ConfigError, match="row 1 of table 't' \\(chunk 0\\) is a str"):
        write_step(ns, "loader", 0, {"t": iter([[{"id": 1}, "x"]])})
    assert write_step(ns, "loader", 0, {"t": iter([rows(0, 3)])}) == 0
    assert read_steps(ns, "t").num_rows == 3


def test_read_batches_streams_what_read_steps_returns(tmp_path):
    """This tests that ``read_batches`` yields the rows and columns of ``read_steps``,
    one batch per entry, with its schema known before any batch, and that bad
    arguments fail at the call, not at the first batch."""
    ns = open_file_ns(tmp_path, entry_max_bytes=2048)
    for step in range(3):
        write_step(ns, "loader", step, {"t": rows(1000 * step, 200)})
    reader = read_batches(ns, "t", start=1)
    assert reader.schema == read_steps(ns, "t", start=3).schema
    got = list(reader)
    assert len(got) == sum(r.entries for s in (1, 2) for r in ns.step_commit(s).runs)
    assert pa.Table.from_batches(got).equals(read_steps(ns, "t", start=1))
    assert read_batches(ns, "t", end=0).read_all().num_rows == 0
    with pytest.raises(StepNotCommitted, match="end step 9 is past the committed steps"):
        read_batches(ns, "t", end=9)


# -- the bounds, measured in fresh processes --------------------------------------------


def measure(mode: str, path: Path, batch_kb: int = 256) -> dict:
    """Run one measured write or read of a STEP_MB step in ``memory_child.py``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(CHILD), mode, str(path), str(STEP_MB), str(ENTRY_MAX),
         str(batch_kb)], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def big_wal(tmp_path) -> Iterator[Path]:
    """A folder for a STEP_MB WAL, removed at the end (pytest keeps old tmp folders)."""
    path = tmp_path / "wal"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_write_step_of_a_generator_adds_about_an_entry_not_the_step(big_wal):
    """This tests that writing a 320 MB step from a generator of 256 KB batches adds
    at most a few entries' worth of RSS (plus the appends in flight and a fixed
    allowance), and writes it as ~2 MB entries."""
    got = measure("write-gen", big_wal)
    assert got["rows"] == (STEP_MB * MiB) // 1000
    assert got["entries"] <= STEP_MB * MiB // ENTRY_MAX + 2
    assert got["added_mb"] * MiB < WRITE_LIMIT, got


def test_write_step_of_a_whole_table_adds_about_an_entry_not_a_copy(big_wal):
    """This tests that writing a 320 MB table handed whole adds at most a few entries'
    worth of RSS: it is encoded and appended slice by slice, never all at once."""
    got = measure("write-table", big_wal)
    assert got["rows"] == (STEP_MB * MiB) // 1000
    assert got["added_mb"] * MiB < WRITE_LIMIT, got


def test_read_batches_adds_about_an_entry_where_read_steps_holds_the_step(big_wal):
    """This tests that iterating ``read_batches`` over a 320 MB step, dropping each
    batch, adds at most a few entries' worth of RSS, while ``read_steps`` of the same
    step, measured the same way, adds the whole step (so the measure would catch a
    read that held it)."""
    measure("write-gen", big_wal, batch_kb=4096)
    streamed = measure("read-stream", big_wal)
    assert streamed["rows"] == (STEP_MB * MiB) // 1000
    assert streamed["added_mb"] * MiB < READ_LIMIT, streamed
    whole = measure("read-table", big_wal)
    assert whole["rows"] == streamed["rows"]
    assert whole["added_mb"] * MiB > STEP_MB * MiB * 0.9, whole
