"""Tables spanning regions, schema versions and opening without creating, on every backend.

The rules under test: sequence numbers are dense per (region, table); a table's
schema versions only add nullable columns or widen types losslessly, so every older
row reads as the newest version; racing writers that evolve one table agree on one
history (the first record of a version number wins); opening a namespace to read
never creates anything.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import read_steps, write_step
from pyspark_durable.errors import LogNotFound, RoutingError, SchemaMismatch
from pyspark_durable.log import Record
from pyspark_durable.wal import Cleaner, Namespace
from pyspark_durable.wal.format.records import encode_meta
from pyspark_durable.wal.format.schemas import common_type, union_by_name
from pyspark_durable.wal.format.snapshot_file import SNAPSHOT_NAME, seal_snapshot
from pyspark_durable.wal.replay.state import NamespaceState
from pyspark_durable.wal.tables import table_id_for_name
from pyspark_durable.wal.upkeep.check import Checker


@pytest.fixture
def open_ns(make_store):
    def make(**kw) -> Namespace:
        return Namespace(make_store(), **kw)
    return make


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_one_table_over_regions_has_dense_sequences_per_region(open_ns):
    """This tests that a table written to three regions numbers its entries densely per
    (region, table), across steps, restarts and a clean."""
    ns = open_ns(entry_max_bytes=1024)
    for ws in range(4):
        a = ns.begin("w", ws)
        for region in (0, 1, 2):
            ids = range(ws * 10000 + region * 1000, ws * 10000 + region * 1000 + 400 + region * 100)
            a.write("orders", pa.table({"id": pa.array(ids, pa.int64())}), region_id=region)
        a.commit()
    ns.expire(1)
    Cleaner(ns, grace_ms=0).run_once()
    ns = open_ns(entry_max_bytes=1024)
    got = read_steps(ns, "orders")
    for region in (0, 1, 2):
        part = got.filter(pa.compute.equal(got.column("_region"), region))
        seqs = sorted(set(part.column("_sequence").to_pylist()))
        end = ns.tables.regions(table_id_for_name("orders"))[region]
        assert seqs == list(range(end - len(seqs), end)) and len(seqs) > 3, region
        assert {i // 1000 % 10 for i in part.column("id").to_pylist()} == {region}
        assert part.num_rows == 3 * (400 + region * 100)  # steps 1..3 are retained
    assert ns.tables.regions(table_id_for_name("orders")).keys() == {0, 1, 2}
    with pytest.raises(RoutingError, match=r"entries in regions \[0, 1, 2\]: name the region"):
        ns.tables.mark_deleted("orders", 1)
    ns.tables.mark_deleted("orders", 1, region_id=2)
    assert [ns.tables.marked_before(r, table_id_for_name("orders")) for r in (0, 1, 2)] == [0, 0, 1]
    assert not Checker(ns.store).run().problems


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_merge_schema_adds_versions_and_old_rows_read_as_newest(open_ns, store_config):
    """This tests that mergeSchema appends nullable columns and widens int32 to int64 and
    float32 to float64 (Arrow and Avro), that old rows read as the newest schema with nulls,
    and that rows missing a column are written with null there."""
    fmt = "avro" if store_config[0] == "file" else "arrow"
    ns = open_ns()
    v0 = pa.table({"id": pa.array([1, 2], pa.int32()), "x": pa.array([0.5, 1.5], pa.float32())})
    write_step(ns, "w", 0, {"t": v0}, payload_format=fmt)
    v1 = pa.table({"id": pa.array([3], pa.int64()), "x": pa.array([2.5], pa.float64()),
                   "note": ["three"]})
    with pytest.raises(SchemaMismatch, match=r"table=t: rows have new columns or wider types: "
                                             r"table has \(id: int32, x: float\), rows have "
                                             r"\(id: int64, x: double, note: string\).*mergeSchema"):
        write_step(ns, "w", 1, {"t": v1}, payload_format=fmt)
    assert ns.steps() == range(0, 1)  # the refused write left no step
    write_step(ns, "w", 1, {"t": v1}, payload_format=fmt, merge_schema=True)
    write_step(ns, "w", 2, {"t": pa.table({"note": ["only a note"]})}, payload_format=fmt)
    reopened = open_ns()
    info = reopened.tables.lookup("t")
    assert [s.names for s in info.schemas] == [["id", "x"], ["id", "x", "note"]]
    assert info.schema.field("id").type == pa.int64() and info.schema.field("x").type == pa.float64()
    got = read_steps(reopened, "t", with_metadata=False)
    assert got.schema == info.schema
    assert got.to_pylist() == [{"id": 1, "x": 0.5, "note": None}, {"id": 2, "x": 1.5, "note": None},
                               {"id": 3, "x": 2.5, "note": "three"},
                               {"id": None, "x": None, "note": "only a note"}]
    assert not Checker(reopened.store).run().problems


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_racing_writers_agree_on_one_schema_history(open_ns):
    """This tests that two writers evolving one table at once, the second paused between
    deciding its version 1 and appending it while the first appends its own version 1,
    end with one history holding both new columns, and every step reads back."""
    first, second = open_ns(), open_ns()
    write_step(first, "w", 0, {"t": pa.table({"id": [1]})})
    appended: list[dict] = []
    real_append = second.ledger.append_json

    def paused_append(records: list[dict]) -> list[int]:
        if records[0]["k"] == "schema" and not appended:
            # the race: `first` lands its version 1 between our decision and our append
            write_step(first, "a", 0, {"t": pa.table({"id": [2], "a": ["from a"]})},
                       merge_schema=True)
        appended.extend(records)
        return real_append(records)

    second.ledger.append_json = paused_append
    write_step(second, "b", 0, {"t": pa.table({"id": [3], "b": [3.5]})}, merge_schema=True)
    assert [r["v"] for r in appended if r["k"] == "schema"] == [1, 2]  # lost v1, merged again
    for ns in (first, second, open_ns()):
        info = ns.ledger.refreshed().tables[table_id_for_name("t")]
        assert [s.names for s in info.schemas] == [["id"], ["id", "a"], ["id", "a", "b"]]
        assert read_steps(ns, "t", with_metadata=False).to_pylist() == [
            {"id": 1, "a": None, "b": None}, {"id": 2, "a": "from a", "b": None},
            {"id": 3, "a": None, "b": 3.5}]


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_case_twins_and_real_conflicts_are_refused(open_ns):
    """This tests that a column differing only in case, or a lossy type change, is refused
    with or without mergeSchema, naming the column."""
    ns = open_ns()
    write_step(ns, "w", 0, {"t": pa.table({"id": [1], "name": ["x"]})})
    with pytest.raises(SchemaMismatch, match=r"column 'Name' differs from the table's column "
                                             r"'name' only in case"):
        write_step(ns, "w", 1, {"t": pa.table({"Name": ["y"]})}, merge_schema=True)
    with pytest.raises(SchemaMismatch, match=r"column 'id' has type int64 in the table and double"):
        write_step(ns, "w", 1, {"t": pa.table({"id": [1.5]})}, merge_schema=True)
    assert len(ns.tables.lookup("t").schemas) == 1


def test_union_by_name_widens_and_names_conflicts():
    """This tests that reading several tables unions columns by name, widens int/float and
    names both tables, the column and both types on a conflict."""
    a = pa.schema([("id", pa.int32()), ("x", pa.string())])
    b = pa.schema([("id", pa.int64()), ("y", pa.float32())])
    assert union_by_name([("a", a), ("b", b)]) == pa.schema(
        [("id", pa.int64()), ("x", pa.string()), ("y", pa.float32())])
    c = pa.schema([("x", pa.int64())])
    with pytest.raises(SchemaMismatch, match=r"column 'x' is string in table 'a' and int64 in "
                                             r"table 'c'.*\.option\(\"tables\", \"a\"\)"):
        union_by_name([("a", a), ("c", c)])
    assert common_type(pa.int64(), pa.float64()) is None  # lossy either way: a conflict


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_opening_to_read_creates_nothing(make_store, store_config, namespace, tmp_path):
    """This tests that opening an unknown namespace without create fails listing the
    namespaces and leaves the storage exactly as it was."""
    write_step(Namespace(make_store()), "w", 0, {"t": [{"id": 1}]})
    before = _listing(store_config, tmp_path, make_store)
    for missing in ("nope", namespace + "x"):
        with pytest.raises(LogNotFound, match=rf"unknown namespace '{missing}'; namespaces: "
                                              rf".*{namespace}"):
            Namespace(make_store(missing), None, create=False)
    opened = Namespace(make_store(), None, create=False)  # exists: opens with its own id
    assert opened.steps() == range(0, 1)
    assert _listing(store_config, tmp_path, make_store) == before
    if store_config[0] == "file":
        root = tmp_path / "nowhere" / "wal"
        with pytest.raises(LogNotFound, match=r"which does not exist"):
            from pyspark_durable.log import open_store
            Namespace(open_store("file", "x", path=str(root)), None, create=False)
        assert not (tmp_path / "nowhere").exists()


def _listing(store_config, tmp_path: Path, make_store) -> object:
    backend, config = store_config
    if backend == "file":
        root = Path(config["path"])
        return sorted((str(p.relative_to(root)), p.stat().st_size if p.is_file() else -1)
                      for p in root.rglob("*"))
    if backend == "kafka":
        return sorted(make_store("listing").admin.list_topics())
    return sorted(type(make_store()).list_namespaces({}))


@pytest.mark.backends("file", "memory", "kafka-confluent", "kafka-python")
def test_wal_written_before_tables_spanned_regions_still_opens(make_store):
    """This tests that a commits log of the earlier format (tables bound to a region, runs
    without a schema version, marks without a region) and a version 2 snapshot recover."""
    store = make_store()
    commits = store.open_log("commits")
    schema = pa.schema([("id", pa.int64())])
    b64 = base64.b64encode(schema.serialize().to_pybytes()).decode()
    region = store.open_region(4)
    from pyspark_durable.codec import EntryKey, codec_for, encode_value
    tid = table_id_for_name("old")
    payload = encode_value(codec_for("arrow", schema).encode(pa.table({"id": [7, 8]})))
    offsets = region.append([Record(EntryKey(0, 4, tid, 0).encode(), payload, (("a", b"att"),))])
    old = [{"k": "ns", "name": store.namespace, "id": 0},
           {"k": "table", "id": tid, "name": "old", "region": 4, "schema": b64, "format": "arrow"},
           {"k": "step", "w": "w", "ws": 0, "att": ["att"], "ts": 1,
            "runs": [[4, tid, offsets[0], offsets[0] + 1, 2, len(payload)]]},
           {"k": "mark", "table": tid, "seq": 1}]
    commits.append([Record(b"", encode_meta(r)) for r in old])
    ns = Namespace(make_store())
    assert ns.tables.region_pairs() == {(4, tid)} and ns.tables.regions(tid) == {4: 1}
    assert ns.tables.marked_before(4, tid) == 1
    assert read_steps(ns, "old").column("id").to_pylist() == [7, 8]
    doc = {"v": 2, "namespace_id": 0, "at": 4, "incarnation": None, "next_step": 1,
           "expired_before": 0, "tables": [old[1]], "next_sequences": {str(tid): 1},
           "marks": {str(tid): 1}, "pairs": {"w": [[0, 0, 1]]}, "bounds": {},
           "last_clean_ms": 0, "readers": {}, "retention": {}, "writer_last": {"w": 0}}
    state = NamespaceState.from_snapshot(store.namespace, seal_snapshot(json.dumps(doc).encode()))
    assert state.next_sequences == {(4, tid): 1} and state.marks == {(4, tid): 1}
    assert state.tables[tid].schemas == (schema,)
    assert SNAPSHOT_NAME and os.sep  # names used above stay importable


def test_cached_spark_handle_of_a_deleted_wal_opens_it_afresh(tmp_path):
    """This tests that a Python worker's cached handle whose WAL folder was deleted does not
    fail every later task: a read says the namespace is unknown, a write starts it anew."""
    import shutil

    from pyspark_durable.spark.options import WalOptions
    from pyspark_durable.spark.session_cache import namespace_for

    opts = WalOptions.parse({"path": str(tmp_path / "wal"), "namespace": "gone"})
    ns = namespace_for(opts)
    write_step(ns, "w", 0, {"t": [{"id": 1}]})
    assert namespace_for(opts, create=False) is ns  # the writer's handle serves reads
    shutil.rmtree(tmp_path / "wal" / "gone")
    with pytest.raises(LogNotFound, match=r"unknown namespace 'gone'; namespaces: none"):
        namespace_for(opts, create=False)
    fresh = namespace_for(opts)
    assert fresh is not ns and fresh.steps() == range(0, 0)
    write_step(fresh, "w", 0, {"t": [{"id": 2}]})
    assert read_steps(fresh, "t").column("id").to_pylist() == [2]
