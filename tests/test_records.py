"""Commits-log records: one class per kind, stored as the JSON docs/record-format.md names."""

from __future__ import annotations

import pyarrow as pa
import pytest

from pyspark_durable.errors import DecodeError
from pyspark_durable.wal.records import (
    RECORD_KINDS,
    CleanRecord,
    CommitRecord,
    DedupRecord,
    ExpireRecord,
    MarkRecord,
    NsRecord,
    ReaderRecord,
    RetentionRecord,
    Run,
    SchemaRecord,
    StepCommit,
    TableRecord,
    WriterRecord,
    decode_record,
    encode_meta,
    schema_to_b64,
)

SCHEMA = pa.schema([("id", pa.int64())])
B64 = schema_to_b64(SCHEMA)

# each record next to the JSON an earlier version wrote for it (field names never change)
STORED: list[tuple[CommitRecord, dict]] = [
    (NsRecord("m", 3, "ab"), {"k": "ns", "name": "m", "id": 3, "inc": "ab"}),
    (TableRecord(7, "t", SCHEMA, "arrow"),
     {"k": "table", "id": 7, "name": "t", "schema": B64, "format": "arrow"}),
    (SchemaRecord(7, 1, SCHEMA), {"k": "schema", "table": 7, "v": 1, "schema": B64}),
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
    (DedupRecord(604_800_000, 64), {"k": "dedup", "window_ms": 604_800_000, "steps": 64}),
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
