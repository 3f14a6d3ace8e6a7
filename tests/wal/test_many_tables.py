"""Many tables in one step: defined in one record, committed in a compact one.

The rules under test: the new tables of one write are defined by one commits record
(a ``tables`` record), whose definitions replay as ``table`` records would, so the
first definition of an id wins and racing definers, in two handles or two processes,
agree on every table; a schema version is never put in the record that defines its
table; a step that writes 1,000 tables commits a record of ~22 bytes per run, which
replays to the same runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import read_steps
from pyspark_durable.errors import SchemaMismatch
from pyspark_durable.wal import Namespace
from pyspark_durable.wal.format.records import StepCommit, decode_record
from pyspark_durable.wal.format.table_records import TablesRecord
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay.copies import CommitsReader
from pyspark_durable.wal.tables import table_id_for_name
from pyspark_durable.wal.upkeep.check import Checker
from tests.helpers import ROOT

TABLES = 1000
STEP_BYTES_MAX = 24_000  # a 1,000-table step: 16 random bytes per run (id, digest) + a little
ID = pa.schema([("id", pa.int64())])
ID_NOTE = pa.schema([("id", pa.int64()), ("note", pa.string())])


def rows(i: int) -> pa.Table:
    return pa.table({"id": pa.array([i, i + 1], pa.int64())})


def records_since(ns: Namespace, offset: int) -> list[tuple[object, int]]:
    """The decoded commits records from ``offset`` on, with the size of each as stored."""
    records = CommitsReader(ns.store.open_log(COMMITS_LOG), offset)  # once each, not a copy
    return [(decode_record(e.value, namespace=ns.name, offset=o)[0], len(e.value))
            for o, e in records]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_first_step_of_1000_new_tables_appends_two_records_and_round_trips(make_store):
    """This tests that a first step writing 1,000 new tables appends one `tables` record
    and one `step` record (not 1,001), that the step record stays under 24 bytes a run,
    and that every table and row reads back after a reopen, content digests checked."""
    ns = Namespace(make_store())
    start = ns.ledger.refreshed().next_offset
    names = [f"t{i}" for i in range(TABLES)]
    infos = ns.tables.define_many([(n, ID) for n in names])
    assert [i.table_id for i in infos] == [table_id_for_name(n) for n in names]
    attempt = ns.begin("loader", 0)
    for i, name in enumerate(names):
        attempt.write(name, rows(i), region_id=i % 2)
    assert attempt.commit() == 0
    appended = records_since(ns, start)
    assert [type(r) for r, _ in appended] == [TablesRecord, StepCommit]
    (tables, _), (step, step_bytes) = appended
    assert len(tables.tables) == TABLES and not tables.versions
    assert len(step.runs) == TABLES and all(len(r.digests) == 16 for r in step.runs)
    assert step_bytes < STEP_BYTES_MAX, step_bytes
    again = Namespace(make_store())
    assert {t.name for t in again.tables.by_id().values()} == set(names)
    assert again.step_commit(0).runs == step.runs
    for i in (0, 1, 499, TABLES - 1):
        got = read_steps(again, f"t{i}", with_metadata=False)
        assert got.column("id").to_pylist() == [i, i + 1]
    assert not Checker(again.store).run().problems


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_step_writing_1000_tables_commits_a_compact_record(make_store):
    """This tests that a later step writing the same 1,000 tables (a streaming query's
    every micro-batch) appends only its step record, smaller than 24,000 bytes where JSON
    lists took 64,000, with every run, digest and sequence number replayed alike."""
    ns = Namespace(make_store())
    names = [f"t{i}" for i in range(TABLES)]
    ns.tables.define_many([(n, ID) for n in names])
    for ws in (0, 1):
        attempt = ns.begin("query", ws)
        for i, name in enumerate(names):
            attempt.write(name, rows(i + ws))
        start = ns.ledger.refreshed().next_offset
        attempt.commit()
    ((step, size),) = records_since(ns, start)
    assert size < STEP_BYTES_MAX, size
    replayed = Namespace(make_store()).step_commit(1)
    assert replayed.runs == step.runs
    assert replayed.first_sequences == {(0, table_id_for_name(n)): 1 for n in names}
    as_lists = {**step.to_json(), "runs": [[r.region_id, r.table_id, r.start, r.end, r.rows,
                                            r.size_bytes, r.schema_version, r.digests]
                                           for r in step.runs]}
    assert len(json.dumps(as_lists, separators=(",", ":"))) > 2.5 * size


def test_sink_task_routing_1000_new_tables_defines_them_in_one_record(tmp_path):
    """This tests that a Spark task's write (`write_batches`, rows routed by tableColumn,
    without Spark) of 1,000 new tables and its driver's commit append two records."""
    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for
    from pyspark_durable.spark.sink import WalCommitMessage, commit_receipts, write_batches

    opts = WalOptions.parse({"path": str(tmp_path / "wal"), "namespace": "sink",
                             "tableColumn": "table"})
    ns = namespace_for(opts)
    start = ns.ledger.refreshed().next_offset
    batch = pa.record_batch({"table": [f"t{i % TABLES}" for i in range(3 * TABLES)],
                             "id": pa.array(range(3 * TABLES), pa.int64())})
    receipt = write_batches(opts, iter([batch]), "query", 0, "a0", batch.schema)
    assert commit_receipts(opts, [WalCommitMessage(receipt)], "query", 0, consecutive=True) == 0
    assert [type(r) for r, _ in records_since(ns, start)] == [TablesRecord, StepCommit]
    assert read_steps(ns, "t7", with_metadata=False).column("id").to_pylist() == [
        7, 7 + TABLES, 7 + 2 * TABLES]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_write_step_defines_the_tables_in_memory_in_one_record(make_store):
    """This tests that `write_step` of 1,000 new tables given in memory appends one
    `tables` record and the step, and that a table given as an iterator (its schema
    unknown until it is read) is defined by its own record when its first chunk comes."""
    from pyspark_durable.endpoint import write_step

    ns = Namespace(make_store())
    start = ns.ledger.refreshed().next_offset
    data: dict = {f"t{i}": rows(i) for i in range(TABLES)}
    data["lazy"] = iter([rows(7), rows(9)])
    assert write_step(ns, "loader", 0, data) == 0
    kinds = [type(r).__name__ for r, _ in records_since(ns, start)]
    assert kinds == ["TablesRecord", "TableRecord", "StepCommit"]
    assert read_steps(ns, "lazy", with_metadata=False).column("id").to_pylist() == [7, 8, 9, 10]
    assert read_steps(ns, "t999", with_metadata=False).column("id").to_pylist() == [999, 1000]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_racing_handles_agree_the_first_definition_wins(make_store):
    """This tests that when handle `a` defines tables between handle `b`'s decision and
    its append, `b`'s definitions of those tables are ignored (a's win, in every handle),
    `b`'s other tables are defined by its record, and the schema version `b`'s rows need
    on top of a's definition comes in a second record, never in the defining one."""
    a, b = Namespace(make_store()), Namespace(make_store())
    shared = [f"s{i}" for i in range(50)]
    only_b = [f"b{i}" for i in range(50)]
    appended: list[dict] = []
    real_append = b.ledger.append_json

    def raced_append(records: list[dict]) -> list[int]:
        if records[0]["k"] == "tables" and not appended:
            a.tables.define_many([(n, ID) for n in shared])  # lands first
        appended.extend(records)
        return real_append(records)

    b.ledger.append_json = raced_append
    infos = b.tables.define_many([(n, ID_NOTE) for n in shared + only_b], merge_schema=True)
    assert [r["k"] for r in appended] == ["tables", "tables"]
    first, second = (TablesRecord.from_json(r) for r in appended)
    assert not first.versions  # a version is never computed against a definition that may lose
    assert not second.tables and {v.table_id for v in second.versions} == {
        table_id_for_name(n) for n in shared}
    for ns in (a, b, Namespace(make_store())):
        tables = ns.ledger.refreshed().tables
        for n in shared:
            assert [s.names for s in tables[table_id_for_name(n)].schemas] == [
                ["id"], ["id", "note"]], n
        for n in only_b:
            assert [s.names for s in tables[table_id_for_name(n)].schemas] == [["id", "note"]]
    assert [i.schema.names for i in infos] == [["id", "note"]] * 100


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_a_refused_batch_defines_nothing_and_one_table_stays_its_own_record(make_store):
    """This tests that definitions of one call are all or nothing (a conflict in one
    table defines none of the others), that a new table asked with two schemas is defined
    once with their merge, and that one definition alone is still a `table` record."""
    ns = Namespace(make_store())
    start = ns.ledger.refreshed().next_offset
    ns.tables.define("old", ID)
    with pytest.raises(SchemaMismatch, match=r"table=old: rows have new columns"):
        ns.tables.define_many([("new", ID), ("old", ID_NOTE)])
    assert set(ns.tables.by_id()) == {table_id_for_name("old")}
    with pytest.raises(SchemaMismatch, match=r"column 'id' has type int64 in the table and"):
        ns.tables.define_many([("new", ID), ("new", pa.schema([("id", pa.float64())]))],
                         merge_schema=True)
    info, same = ns.tables.define_many([("new", ID), ("new", ID_NOTE)], merge_schema=True)
    assert info is same and info.schema == ID_NOTE and len(info.schemas) == 1
    kinds = [r.kind for r, _ in records_since(ns, start)]
    assert kinds == ["table", "table"]
    assert ns.tables.define_many([("old", ID), ("new", ID)]) == [ns.tables.lookup("old"), info]
    # tables that exist and fit append nothing (two records, each with its copies)
    assert ns.ledger.refreshed().next_offset == start + 2 * ns.store.record_copies


CHILD = """
import json, os, sys, time
import pyarrow as pa
from pyspark_durable.log import open_store
from pyspark_durable.wal import Namespace

path, go, schema_names, count = sys.argv[1], sys.argv[2], sys.argv[3].split(","), int(sys.argv[4])
schema = pa.schema([(c, pa.int64() if c == "id" else pa.string()) for c in schema_names])
ns = Namespace(open_store("file", "race", path=path))
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
infos = ns.tables.define_many([(f"t{i}", schema) for i in range(count)], merge_schema=True)
print(json.dumps({str(i.table_id): i.schema.names for i in infos}), flush=True)
sys.stdin.readline()  # the other process is done too
print(json.dumps({str(t): [s.names for s in i.schemas] for t, i in ns.ledger.refreshed().tables.items()}))
"""


def test_racing_processes_agree_on_every_table(tmp_path):
    """This tests that two processes defining the same 300 tables at the same moment,
    one with (id) and one with (id, note), each get tables their rows fit, with ids from
    the names, and end with one history per table that both see (and a fresh handle
    too): whichever definition won, the newest schema holds both processes' columns."""
    from pyspark_durable.log import open_store

    count = 300
    path, go = str(tmp_path / "wal"), tmp_path / "go"
    Namespace(open_store("file", "race", path=path)).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, path, str(go), cols, str(count)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
                for cols in ("id", "id,note")]
    for child in children:  # both opened the namespace and wait for the go
        assert child.stdout.readline().strip() == "ready", child.stderr.read()
    go.touch()
    got = [json.loads(child.stdout.readline() or "null") for child in children]
    views = []
    for child in children:
        out, err = child.communicate("done\n", timeout=120)
        assert child.returncode == 0, err
        views.append(json.loads(out))
    fresh = Namespace(open_store("file", "race", path=path))
    mine = {str(t): [s.names for s in i.schemas] for t, i in fresh.ledger.refreshed().tables.items()}
    assert views[0] == views[1] == mine
    ids = {str(table_id_for_name(f"t{i}")) for i in range(count)}
    assert set(mine) == set(got[0]) == set(got[1]) == ids
    for table, history in mine.items():
        assert history in ([["id"], ["id", "note"]], [["id", "note"]]), history
        assert got[0][table] in history and got[1][table] == ["id", "note"]
    kinds = [type(r).__name__ for r, _ in records_since(fresh, 0)]
    assert kinds.count("TablesRecord") <= 4 and "TableRecord" not in kinds, kinds
    fresh.close()
