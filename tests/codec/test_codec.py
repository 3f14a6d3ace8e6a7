"""The record format: keys, values and payload codecs, and their typed decode errors."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest

from pyspark_durable.codec import (
    KEY_SIZE,
    EntryKey,
    codec_for,
    decode_key,
    decode_value,
    encode_value,
)
from pyspark_durable.errors import ConfigError, DecodeError, InvalidVersion, NewerVersion


def test_key_layout_is_big_endian_fixed_width():
    """This tests that the key is 26 bytes, big-endian, laid out as DESIGN.md draws it."""
    key = EntryKey(7, 0x0102, 0x0A0B, 0xFFFF_FFFF_FFFF_FFFE).encode()
    assert len(key) == KEY_SIZE == 26
    assert key == (b"\x07" + (0x0102).to_bytes(8, "big") + (0x0A0B).to_bytes(8, "big")
                   + (0xFFFF_FFFF_FFFF_FFFE).to_bytes(8, "big") + b"\x00")
    assert decode_key(key) == EntryKey(7, 0x0102, 0x0A0B, 0xFFFF_FFFF_FFFF_FFFE)


def test_key_byte_order_is_region_table_sequence_order():
    """This tests that sorting encoded keys sorts by (region, table, sequence)."""
    keys = [EntryKey(0, r, t, s) for r in (0, 1, 300) for t in (2, 1 << 40) for s in (0, 9, 256)]
    assert sorted(keys, key=lambda k: k.encode()) == sorted(
        keys, key=lambda k: (k.region_id, k.table_id, k.sequence_num))


@pytest.mark.parametrize("data, message", [
    (b"", "key must be 26 bytes, found 0"),
    (b"\x00" * 25, "key must be 26 bytes, found 25"),
    (b"\x00" * 27, "key must be 26 bytes, found 27"),
])
def test_short_or_long_keys_are_typed_errors(data, message):
    """This tests that a key of the wrong size fails with the size found."""
    with pytest.raises(DecodeError, match=message):
        decode_key(data, expect_region_id=3, offset=42)


def test_key_version_namespace_and_region_are_checked():
    """This tests that decode names the expected and found version, namespace and region."""
    good = EntryKey(1, 3, 5, 8).encode()
    with pytest.raises(NewerVersion, match=r"region=3 offset=9: key version 1 is newer than "
                       r"this release reads \(newest: 0\)") as info:
        decode_key(good[:-1] + b"\x01", expect_region_id=3, offset=9)
    assert (info.value.element, info.value.found, info.value.newest) == ("key", 1, 0)
    assert isinstance(info.value, InvalidVersion)  # and a DecodeError, as before
    with pytest.raises(DecodeError, match="belongs to namespace id 1, expected 2"):
        decode_key(good, expect_namespace_id=2)
    with pytest.raises(DecodeError, match=r"region=4 offset=7: key belongs to region 3, expected 4"):
        decode_key(good, expect_region_id=4, offset=7)


def test_key_fields_must_fit():
    """This tests that out-of-range key fields are refused before encoding."""
    with pytest.raises(DecodeError, match="namespace id 256 is not a u8"):
        EntryKey(256, 0, 0, 0)
    with pytest.raises(DecodeError, match="sequence_num -1 is not a u64"):
        EntryKey(0, 0, 0, -1)


def test_value_version():
    """This tests that values carry a version byte that decode checks."""
    assert bytes(decode_value(encode_value(b"abc"))) == b"abc"
    with pytest.raises(NewerVersion, match=r"region=2 offset=5: value version 9 is newer than "
                       r"this release reads \(newest: 0\)"):
        decode_value(b"\x09abc", region_id=2, offset=5)
    with pytest.raises(DecodeError, match="value is empty"):
        decode_value(b"")


RICH = pa.table({
    "i8": pa.array([1, None, -3], pa.int8()),
    "i64": pa.array([1, 2, None], pa.int64()),
    "f": pa.array([1.5, None, 2.25], pa.float32()),
    "s": pa.array(["a", None, "ünï"]),
    "b": pa.array([b"\x00\x01", None, b""]),
    "ok": pa.array([True, False, None]),
    "dec": pa.array([Decimal("1.2300"), None, Decimal("-5.0000")], pa.decimal128(10, 4)),
    "day": pa.array([dt.date(2024, 1, 1), None, dt.date(1970, 1, 1)]),
    "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.UTC), None,
                    dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)],
                   pa.timestamp("us", tz="UTC")),
    "ntz": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3), None, None], pa.timestamp("us")),
    "arr": pa.array([[1, 2], None, []], pa.list_(pa.int32())),
    "m": pa.array([[(1, "x")], None, []], pa.map_(pa.int32(), pa.string())),
    "st": pa.array([{"a": 1, "b": [1.0]}, None, {"a": None, "b": None}],
                   pa.struct([("a", pa.int64()), ("b", pa.list_(pa.float64()))])),
})


@pytest.mark.parametrize("fmt", ["arrow", "avro"])
def test_payload_round_trip_all_types(fmt):
    """This tests that Arrow and Avro payloads round-trip every supported type with nulls."""
    codec = codec_for(fmt, RICH.schema)
    back = pa.Table.from_batches(codec.decode(codec.encode(RICH)))
    assert back.equals(RICH)


def test_raw_payload_round_trip_and_garbage():
    """This tests raw byte payloads and that truncated ones are a typed error."""
    codec = codec_for("raw", pa.schema([pa.field("value", pa.binary())]))
    table = pa.table({"value": pa.array([b"a", b"", b"\xff" * 1000], pa.binary())})
    data = codec.encode(table)
    assert pa.Table.from_batches(codec.decode(data)).equals(table)
    with pytest.raises(DecodeError, match="truncated or garbage"):
        codec.decode(data[:-10])


@pytest.mark.parametrize("fmt", ["arrow", "avro"])
def test_garbage_payloads_are_typed_errors(fmt):
    """This tests that decoding garbage as a payload raises DecodeError, not a crash."""
    codec = codec_for(fmt, RICH.schema)
    with pytest.raises(DecodeError):
        codec.decode(b"\x01\x02garbage-bytes-that-are-no-payload")


def test_unknown_payload_format_lists_valid_ones():
    """This tests that an unknown payload format names the valid ones."""
    with pytest.raises(ConfigError, match="valid: arrow, avro, raw"):
        codec_for("protobuf", RICH.schema)


EDGES = pa.table({
    # 9999-12-31 23:59:59.999999 in a zone west of UTC is year 10000 in UTC, and the
    # smallest instant Spark holds: both outside Python's datetime
    "ts": pa.array([253402329599999999, -62135596800000000 - 86_400_000_000, None],
                   pa.timestamp("us", tz="UTC")),
    "ntz": pa.array([253402300799999999, 0, None], pa.timestamp("us")),
    "d": pa.array([2_932_896, -719_162, None], pa.date32()),
    "dur": pa.array([86_400_000_001, -1, None], pa.duration("us")),
    "t": pa.array([86_399_999_999_000, 0, None], pa.time64("ns")),
    "n": pa.nulls(3, pa.null()),
    "a": pa.array([{"b": {"x": 1}}, None, {"b": None}],
                  pa.struct([("b", pa.struct([("x", pa.int32())]))])),
    "a_b": pa.array([{"x": 2}, None, {"x": None}], pa.struct([("x", pa.int32())])),
    "m": pa.array([[({"x": 1}, {"x": 2})], None, []],
                  pa.map_(pa.struct([("x", pa.int32())]), pa.struct([("x", pa.int32())]))),
    "variant": pa.array([{"value": b"\x0c\x01", "metadata": b"\x01\x00\x00"}, None, None],
                        pa.struct([("value", pa.binary()),
                                   pa.field("metadata", pa.binary(),
                                            metadata={b"variant": b"true"})])),
}).replace_schema_metadata(None)


@pytest.mark.parametrize("fmt", ["arrow", "avro"])
def test_payload_round_trips_edge_values_and_field_metadata(fmt):
    """This tests that timestamps and dates outside Python's datetime range, durations,
    times, the null type, nested field metadata and a.b beside a_b round-trip exactly
    (Avro once overflowed on year 10000 and refused the a.b / a_b record names)."""
    schema = EDGES.schema.set(0, EDGES.schema.field(0).with_metadata({b"k": b"v"}))
    table = EDGES.cast(schema)
    codec = codec_for(fmt, schema)
    back = pa.Table.from_batches(codec.decode(codec.encode(table)))
    assert back.equals(table, check_metadata=True)
    assert back.schema.field("variant").type.field(1).metadata == {b"variant": b"true"}


@pytest.mark.parametrize("names", [
    ("a.b", "a_b"), ("a_b", "a_5f_b"), ("x", "x_r"), ("k", "key"), ("ü", "_fc_"),
])
def test_avro_record_names_differ_for_every_pair_of_paths(names):
    """This tests that Avro record names are derived injectively from the column path:
    struct and map columns whose names escape alike still get distinct records."""
    from pyspark_durable.codec import avro_schema

    inner = pa.struct([("x", pa.int32())])
    schema = pa.schema([pa.field(n, pa.struct([("s", inner), ("m", pa.map_(inner, inner))]))
                        for n in names])
    found: list[str] = []

    def records(node):
        if isinstance(node, dict):
            if node.get("type") == "record":
                found.append(node["name"])
            for v in node.values():
                records(v)
        elif isinstance(node, list):
            for v in node:
                records(v)

    records(avro_schema(schema))
    assert len(found) == len(set(found)) == 1 + 5 * len(names)  # row; per column 5
    codec_for("avro", schema)  # fastavro parses it: no redefined named type


_VARIANT = pa.struct([pa.field("value", pa.binary()),
                      pa.field("metadata", pa.binary(), metadata={b"variant": b"true"})])
_GEOMETRY = pa.struct([pa.field("srid", pa.int32()), pa.field("wkb", pa.binary())])
_NOT_NULL_X = pa.struct([pa.field("x", pa.int32(), nullable=False)])


def _as_spark_writes(t: pa.DataType, rows: list) -> pa.StructArray:
    """A struct array as Spark's Arrow writer makes it: a null row's fields null too
    (pyarrow's builders would give them empty values instead)."""
    fields = [pa.array([None if r is None else r[f.name] for r in rows], f.type) for f in t]
    return pa.StructArray.from_arrays(fields, fields=list(t),
                                      mask=pa.array([r is None for r in rows]))


VARIANT_ROW = {"value": b"\x0c\x01", "metadata": b"\x01\x00\x00"}
POINT = {"srid": 4326, "wkb": b"\x01\x01\x00\x00\x00"}
NULLS = pa.table({
    "v": _as_spark_writes(_VARIANT, [None, VARIANT_ROW, None]),
    "g": _as_spark_writes(_GEOMETRY, [None, POINT, None]),
    "v_items": pa.ListArray.from_arrays(
        pa.array([0, 2, 2, 3], pa.int32()), _as_spark_writes(_VARIANT, [VARIANT_ROW, None, None]),
        mask=pa.array([False, True, False])),
    "g_values": pa.MapArray.from_arrays(
        pa.array([0, 2, 2, 2], pa.int32()), pa.array(["a", "b"]),
        _as_spark_writes(_GEOMETRY, [None, POINT])),
    "v_field": pa.StructArray.from_arrays(
        [_as_spark_writes(_VARIANT, [None, None, VARIANT_ROW])],
        fields=[pa.field("v", _VARIANT)], mask=pa.array([True, False, False])),
    "strict": pa.StructArray.from_arrays([pa.array([None, 7, None], pa.int32())],
                                         fields=list(_NOT_NULL_X),
                                         mask=pa.array([True, False, True])),
    "voids": pa.array([[None, None], None, []], pa.list_(pa.null())),
    "void_values": pa.array([[("k", None), ("n", None)], None, []],
                            pa.map_(pa.string(), pa.null())),
    "day": pa.array([None, dt.date(2024, 1, 1), None]),  # Avro casts to its plain numbers
})


@pytest.mark.parametrize("fmt", ["arrow", "avro"])
def test_payload_round_trips_nulls_at_every_level(fmt):
    """This tests that both payload formats give back nulls as Spark's Arrow writer makes
    them: a null variant or geometry (a null struct of null fields), nulls as an array's
    elements and a map's values, a struct's null field, a null struct whose field is not
    nullable, and arrays and maps of the null type (which pyarrow's cast breaks)."""
    codec = codec_for(fmt, NULLS.schema)
    back = pa.Table.from_batches(codec.decode(codec.encode(NULLS)))
    back.validate(full=True)
    assert back.equals(NULLS)
    assert back.to_pylist() == NULLS.to_pylist()


@pytest.mark.parametrize("column", [
    pa.array([[None, None], None, [None]], pa.list_(pa.null())),
    pa.array([[("k", None), ("n", None)], None, [("k", None)]], pa.map_(pa.string(), pa.null())),
    pa.array([[{"x": None}, {"x": None}], [{"x": None}], None],
             pa.list_(pa.struct([("x", pa.null())]))),
    pa.array([{"l": [None, None]}, None, {"l": [None]}], pa.struct([("l", pa.list_(pa.null()))])),
], ids=["list", "map", "list-of-struct", "struct-of-list"])
def test_casts_hold_for_the_null_type_in_lists_and_maps(column):
    """This tests that the codec's cast gives back a list or map holding the null type,
    whole or sliced, where pyarrow's own cast makes an invalid array of it."""
    from pyspark_durable.codec.casts import cast, cast_array

    renamed = pa.schema([pa.field("c", column.type, metadata={b"k": b"v"})])
    for part in (column, column.slice(1)):
        got = cast_array(part, part.type)
        got.validate(full=True)
        assert got.to_pylist() == part.to_pylist()
        table = cast(pa.table({"c": part}), renamed)
        assert table.schema.equals(renamed, check_metadata=True)
        assert table.column("c").to_pylist() == part.to_pylist()
