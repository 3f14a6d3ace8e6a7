"""Commits-log records: one class per kind, stored as the JSON docs/record-format.md names."""

from __future__ import annotations

import base64
import random
import zlib

import pyarrow as pa
import pytest

from pyspark_durable.errors import DecodeError
from pyspark_durable.wal.format.commit_record import RECORD_KINDS, CommitRecord
from pyspark_durable.wal.format.records import (
    CleanRecord,
    ClocksRecord,
    DedupRecord,
    ExpireRecord,
    LostRecord,
    MarkRecord,
    NsRecord,
    OneOffsRecord,
    ReaderRecord,
    RetentionRecord,
    Run,
    StepCommit,
    WriterRecord,
    decode_record,
    decode_runs,
    encode_meta,
    encode_runs,
)
from pyspark_durable.wal.format.table_records import (
    SchemaRecord,
    TableRecord,
    TablesRecord,
    schema_to_b64,
)

SCHEMA = pa.schema([("id", pa.int64())])
B64 = schema_to_b64(SCHEMA)
WIDE = pa.schema([("id", pa.int64()), ("note", pa.string())])

# each record next to the JSON an earlier version wrote for it (field names never change)
STORED: list[tuple[CommitRecord, dict]] = [
    (NsRecord("m", 3, "ab"), {"k": "ns", "name": "m", "id": 3, "inc": "ab"}),
    (TableRecord(7, "t", SCHEMA, "arrow"),
     {"k": "table", "id": 7, "name": "t", "schema": B64, "format": "arrow"}),
    (SchemaRecord(7, 1, SCHEMA), {"k": "schema", "table": 7, "v": 1, "schema": B64}),
    (TablesRecord((TableRecord(7, "t", SCHEMA, "arrow"), TableRecord(8, "u", SCHEMA, "avro")),
                  (SchemaRecord(9, 1, WIDE),)),
     {"k": "tables", "schemas": [B64, schema_to_b64(WIDE)],
      "tables": [[7, "t", 0, "arrow"], [8, "u", 0, "avro"]], "versions": [[9, 1, 1]]}),
    (StepCommit("w", 4, ("a1",), (Run(0, 7, 10, 12, 5, 99, 1),), 1234),
     {"k": "step", "w": "w", "ws": 4, "att": ["a1"], "ts": 1234,
      "runs": [[0, 7, 10, 12, 5, 99, 1]]}),
    (WriterRecord("w", 5), {"k": "writer", "w": "w", "ws": 5}),
    (ExpireRecord(8), {"k": "expire", "before": 8}),
    (MarkRecord(7, 2, 0), {"k": "mark", "table": 7, "region": 0, "seq": 2}),
    (CleanRecord(55, {1: 40}), {"k": "clean", "ts": 55, "regions": {"1": 40}}),
    (ReaderRecord("r", 3, True), {"k": "reader", "id": "r", "next": 3, "hold": True}),
    (ReaderRecord("r", drop=True), {"k": "reader", "id": "r", "drop": True}),
    (RetentionRecord({"max_steps": 2}), {"k": "retention", "policy": {"max_steps": 2}}),
    (LostRecord(3, "region=0 offset=3: damaged"),
     {"k": "lost", "step": 3, "why": "region=0 offset=3: damaged"}),
    (DedupRecord(604_800_000, 64), {"k": "dedup", "window_ms": 604_800_000, "steps": 64}),
    (ClocksRecord(86_400_000), {"k": "clocks", "step_ms": 86_400_000}),
    (OneOffsRecord(16_384), {"k": "oneoffs", "writers": 16_384}),
    (StepCommit("batch-1", 0, ("a2",), (Run(0, 7, 12, 13, 1, 9, 0),), 1300, started_ms=1200),
     {"k": "step", "w": "batch-1", "ws": 0, "att": ["a2"], "ts": 1300,
      "runs": [[0, 7, 12, 13, 1, 9, 0]], "sm": 1200}),
]


def test_every_kind_is_stored_as_before_and_decodes_back():
    """This tests that every commits-log record kind encodes to the same bytes an earlier
    version wrote and decodes back to an equal record, so old namespaces still open."""
    assert {r.kind for r, _ in STORED} == set(RECORD_KINDS)
    for record, stored in STORED:
        assert encode_meta(record.to_json()) == encode_meta(stored)
        decoded, tag = decode_record(encode_meta({**stored, "i": "ab"}), namespace="m", offset=0)
        assert tag == "ab"
        if isinstance(record, StepCommit):  # its replay fields are not stored
            assert decoded.to_json() == record.to_json()
        else:
            assert decoded == record


def test_old_record_forms_still_decode():
    """This tests that records written before tables spanned regions and before schema
    versions decode: a table's region is ignored, a mark without region names none, and
    a 6-element run is schema version 0."""
    table, _ = decode_record(encode_meta({"k": "table", "id": 7, "name": "t", "region": 4,
                                          "schema": B64, "format": "arrow"}),
                             namespace="m", offset=1)
    assert table == TableRecord(7, "t", SCHEMA, "arrow")
    mark, _ = decode_record(encode_meta({"k": "mark", "table": 7, "seq": 1}),
                            namespace="m", offset=2)
    assert mark == MarkRecord(7, 1, None)
    step, tag = decode_record(encode_meta({"k": "step", "w": "w", "ws": 0, "att": ["a"],
                                           "ts": 1, "runs": [[4, 7, 0, 1, 1, 10]]}),
                              namespace="m", offset=3)
    assert tag is None and step.runs == (Run(4, 7, 0, 1, 1, 10, 0),)


@pytest.mark.parametrize(("stored", "message"), [
    ({"k": "nope"}, r"unknown commit-log record kind 'nope'"),
    ({"k": "expire"}, r"commit-log expire record is malformed: KeyError\('before'\)"),
    ({"k": "step", "w": "w", "ws": 0, "att": [], "ts": 1, "runs": [[1]]},
     r"commit-log step record is malformed"),
])
def test_unknown_or_malformed_records_are_decode_errors(stored, message):
    """This tests that a record of an unknown kind, or missing a field of its kind, is a
    DecodeError naming the commits log and the offset, not a crash."""
    with pytest.raises(DecodeError, match=message) as info:
        decode_record(encode_meta(stored), namespace="m", offset=9)
    assert "offset=9" in str(info.value) and "log=commits" in str(info.value)


# four runs as the compact form stores them (RUNS_FORMAT 1): as written, and deflated
RUNS = (Run(0, 7, 10, 12, 5, 99, 1, "ab" * 16), Run(0, 2**63 + 5, 12, 13, 1, 40, 0, "0123456789abcdef"),
        Run(3, 7, 0, 2, 9, 120, 1), Run(0, 7, 20, 21, 2, 50, 1, "cd" * 8))
COMPACT = ("AQAEAAAAAgAAAAgHAAAAAAAAAAUAAAAAAACAAQAAAQEBAAADAAEUAAAOAQIBAgEBBQEJAgFjKHgyAQMBAgOrq6ur"
           "q6urq6urq6urq6urASNFZ4mrze/Nzc3Nzc3NzQ==")


def test_compact_runs_decode_as_stored_and_round_trip():
    """This tests that the compact runs of a step (from 4 runs on) decode to the runs they
    were written from, as stored and deflated, that any runs (regions interleaved, tables
    repeated, starts going back, no digests, u64 ids) round-trip through the record, and
    that a step of fewer runs, or runs the compact form cannot hold, keeps JSON lists."""
    assert decode_runs(COMPACT) == RUNS
    raw = base64.b64decode(COMPACT)
    deflated = base64.b64encode(bytes((1, 1)) + zlib.compress(raw[2:])).decode()
    assert decode_runs(deflated) == RUNS
    assert decode_runs(encode_runs(RUNS)) == RUNS
    rng = random.Random(27)
    for _ in range(200):
        runs = []
        for _ in range(rng.randrange(4, 40)):
            start = rng.choice([0, rng.randrange(1 << 20), rng.randrange(1 << 62)])
            n = rng.randrange(0, 5)
            digests = "".join(f"{rng.getrandbits(64):016x}" for _ in range(n)) \
                if rng.random() < 0.8 else ""
            runs.append(Run(rng.choice([0, 1, 2**64 - 1]), rng.choice([1, 2, 2**64 - 1]),
                            start, start + n, rng.randrange(1 << 33), rng.randrange(1 << 40),
                            rng.randrange(3), digests))
        step = StepCommit("w", 1, ("a",), tuple(runs), 5)
        stored = step.to_json()
        assert isinstance(stored["runs"], str)
        back, _ = decode_record(encode_meta(stored), namespace="m", offset=0)
        assert back.runs == step.runs
    assert isinstance(encode_runs(RUNS[:3]), list)  # a few runs: JSON lists, as small
    for odd in (Run(0, 7, 0, 1, 1, 1, 0, "AB" * 8), Run(0, 7, 0, 2, 1, 1, 0, "ab" * 8),
                Run(0, 2**64, 0, 1, 1, 1), Run(0, 7, 5, 4, 1, 1), Run(-1, 7, 0, 1, 1, 1)):
        stored = encode_runs((*RUNS[:3], odd))
        assert isinstance(stored, list) and decode_runs(stored)[-1] == odd


def test_a_1000_table_step_record_is_compact():
    """This tests that a step writing 1,000 tables, one entry each with its digest and
    random row and byte counts, is stored in under 28,000 bytes (16 random bytes a run
    for table id and digest, 4 for rows and bytes, as base64), where the JSON lists of an
    earlier version took over 60,000."""
    rng = random.Random(1)
    runs = tuple(Run(0, rng.getrandbits(63) | 1 << 63, 5000 + i, 5001 + i, rng.randrange(1, 500),
                     rng.randrange(200, 60000), 0, f"{rng.getrandbits(64):016x}")
                 for i in range(1000))
    step = StepCommit("query-6c1f", 41, ("p0-a0-t1-0a1b2c3d", "p1-a0-t2-4e5f6a7b"), runs,
                      1764000000000, event_time=(1, 2))
    stored = encode_meta({**step.to_json(), "i": "f" * 32})
    assert len(stored) < 28_000, len(stored)
    as_lists = encode_meta({**step.to_json(), "runs": [
        [r.region_id, r.table_id, r.start, r.end, r.rows, r.size_bytes, r.schema_version,
         r.digests] for r in runs], "i": "f" * 32})
    assert len(as_lists) > 60_000
    assert decode_record(stored, namespace="m", offset=0)[0].runs == runs


@pytest.mark.parametrize(("runs", "message"), [
    ("AQ==", r"compact runs of 1 bytes, shorter than their 2-byte head"),
    (base64.b64encode(b"\x02\x00" + base64.b64decode(COMPACT)[2:]).decode(),
     r"compact runs format version 2 is newer than this release reads \(newest: 1\)"),
    (base64.b64encode(b"\x00\x00" + base64.b64decode(COMPACT)[2:]).decode(),
     r"compact runs of format 0, expected 1"),
    (base64.b64encode(b"\x01\x02" + base64.b64decode(COMPACT)[2:]).decode(),
     r"unknown flags 0x02"),
    (base64.b64encode(b"\x01\x01not deflated").decode(), r"do not inflate"),
    (base64.b64encode(base64.b64decode(COMPACT)[:40]).decode(), r"inside a column"),
    (base64.b64encode(base64.b64decode(COMPACT)[:-1]).decode(), r"hold 31 digest bytes"),
    (base64.b64encode(base64.b64decode(COMPACT) + b"x").decode(), r"hold 33 digest bytes"),
    (base64.b64encode(base64.b64decode(COMPACT).replace(bytes.fromhex("0100000101"),
                                                        bytes.fromhex("0100000301"))).decode(),
     r"run 2 refers to table 3 of 2 used so far"),
    ("AQ!!", r"Non-base64|Incorrect padding|Only base64"),
])
def test_damaged_compact_runs_are_decode_errors(runs, message):
    """This tests that compact runs that are cut, of another format (a newer one is the
    DecodeError NewerVersion), with unknown flags,
    not inflating, with digests missing or extra, referring to a table not listed, or not
    base64, are a DecodeError naming the offset, never wrong runs."""
    stored = {"k": "step", "w": "w", "ws": 0, "att": ["a"], "ts": 1, "runs": runs}
    with pytest.raises(DecodeError, match=message) as info:
        decode_record(encode_meta(stored), namespace="m", offset=9)
    assert "offset=9" in str(info.value)
