"""Payload codecs: a batch of rows <-> bytes.

``arrow`` (default) is an Arrow IPC stream: zero-copy on read, the fastest.
``avro`` is schemaless fastavro records, the Avro schema derived from the table's
Arrow schema, which the namespace metadata keeps (so each payload carries none).
``raw`` is length-prefixed opaque byte strings, one column ``value``.

Every codec encodes a :class:`pyarrow.Table` (or RecordBatch) and decodes to a list
of :class:`pyarrow.RecordBatch`, so the layers above never care which one is used.
"""

from __future__ import annotations

import io
import struct
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import pyarrow as pa

from pyspark_durable.codec.arrays import bytes_array
from pyspark_durable.codec.casts import cast
from pyspark_durable.codec.keys import VALUE_PREFIX, encode_value
from pyspark_durable.errors import ConfigError, DecodeError

Batchish = pa.Table | pa.RecordBatch


class PayloadCodec(ABC):
    """Encodes and decodes the payload of one entry."""

    name: ClassVar[str]

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema

    @abstractmethod
    def encode(self, batch: Batchish) -> bytes: ...

    @abstractmethod
    def decode(self, payload: bytes | memoryview) -> list[pa.RecordBatch]: ...

    def encode_value(self, batch: Batchish) -> bytes | pa.Buffer:
        """The whole entry value: the value version byte, then the payload."""
        return encode_value(self.encode(batch))


SMALL_VALUE_BYTES = 64 << 10  # rows up to this size are encoded in one pass


class ArrowCodec(PayloadCodec):
    """Arrow IPC stream format; the schema travels in the payload."""

    name = "arrow"

    def encode(self, batch: Batchish) -> bytes:
        return self.encode_value(batch)[len(VALUE_PREFIX):].to_pybytes()

    def encode_value(self, batch: Batchish) -> pa.Buffer:
        """The version byte and the IPC stream written into one Arrow buffer, handed to
        the log as is: no copy to ``bytes`` and none to prefix the version (the file
        log writes it with ``writev``, librdkafka takes it as a read-only buffer).

        A large value's buffer is sized first by a counting pass (which copies nothing):
        a growing ``BufferOutputStream`` keeps up to twice the value's size allocated,
        and a writer holds many values in flight until the log has them. A small one
        (a commit of a few rows) is written in one pass: the spare room is a few KiB,
        and the second pass would cost as much as the write."""
        if batch.nbytes <= SMALL_VALUE_BYTES:
            grown = pa.BufferOutputStream()
            grown.write(VALUE_PREFIX)
            with pa.ipc.new_stream(grown, batch.schema) as writer:
                writer.write(batch)
            return grown.getvalue()
        counted = pa.MockOutputStream()
        with pa.ipc.new_stream(counted, batch.schema) as writer:
            writer.write(batch)
        value = pa.allocate_buffer(len(VALUE_PREFIX) + counted.size())
        sink = pa.FixedSizeBufferWriter(value)
        sink.write(VALUE_PREFIX)
        with pa.ipc.new_stream(sink, batch.schema) as writer:
            writer.write(batch)
        return value

    def decode(self, payload: bytes | memoryview) -> list[pa.RecordBatch]:
        try:
            reader = pa.ipc.open_stream(pa.py_buffer(payload))
            return list(reader)
        except (pa.ArrowInvalid, pa.ArrowException) as exc:
            raise DecodeError(f"payload is not an Arrow IPC stream: {exc}") from exc


_RAW_LEN = struct.Struct(">I")


class RawCodec(PayloadCodec):
    """Opaque byte strings (one binary column named ``value``), length-prefixed."""

    name = "raw"
    SCHEMA = pa.schema([pa.field("value", pa.binary())])

    def encode(self, batch: Batchish) -> bytes:
        if batch.num_columns != 1 or not pa.types.is_binary(batch.schema.field(0).type):
            raise DecodeError(f"raw payloads carry one binary column, got {batch.schema}")
        out = bytearray(_RAW_LEN.pack(batch.num_rows))
        for value in batch.column(0).to_pylist():
            if value is None:
                raise DecodeError("raw payloads cannot hold null values")
            out += _RAW_LEN.pack(len(value))
            out += value
        return bytes(out)

    def decode(self, payload: bytes | memoryview) -> list[pa.RecordBatch]:
        view = memoryview(payload)
        try:
            (count,) = _RAW_LEN.unpack_from(view, 0)
            pos, values = 4, []
            for _ in range(count):
                (size,) = _RAW_LEN.unpack_from(view, pos)
                pos += 4
                if pos + size > len(view):
                    raise struct.error("value runs past the end")
                values.append(bytes(view[pos : pos + size]))
                pos += size
        except struct.error as exc:
            raise DecodeError(f"raw payload is truncated or garbage: {exc}") from exc
        if pos != len(view):
            raise DecodeError(f"raw payload has {len(view) - pos} trailing bytes")
        return [pa.RecordBatch.from_arrays([bytes_array(values)], schema=self.SCHEMA)]


def _escape(name: str) -> str:
    """A column name in Avro's name alphabet: ASCII letters and digits kept, every
    other character (``_`` too) as ``_<hex code point>_``. Injective, as
    :func:`_record_name` needs."""
    return "".join(c if c.isascii() and c.isalnum() else f"_{ord(c):x}_" for c in name)


def _record_name(path: tuple[str, ...]) -> str:
    """The Avro name of the record at ``path`` (tokens from :func:`_avro_type`).

    Avro names are global to a schema, so they must differ whenever paths differ:
    ``a.b`` and ``a_b`` are two columns, and both may be structs. Each token is
    ``_`` + a marker letter outside the hex digits (``n`` a field name, then
    escaped; ``i`` an array item, ``k``/``v`` a map key/value, ``r`` the record
    itself, ``p`` a map's key-value pair), so the name reads back to one path.
    """
    return "f" + "".join(path)


_MARKERS = frozenset("nikvrp")


def _avro_type(dtype: pa.DataType, path: tuple[str, ...], where: str, logical: bool) -> Any:
    """Map an Arrow type to an Avro type (always nullable: Spark columns may be).

    ``logical``: dates and timestamps carry Avro's logical types (the documented
    schema); the codec itself reads and writes their plain numbers, which are the
    same bytes and have no Python ``datetime`` range to overflow."""
    assert all(p[1] in _MARKERS for p in path)
    t = pa.types
    if t.is_null(dtype):
        return "null"  # the only value is null: no union
    if t.is_boolean(dtype):
        base: Any = "boolean"
    elif t.is_int8(dtype) or t.is_int16(dtype) or t.is_int32(dtype):
        base = "int"
    elif t.is_int64(dtype) or t.is_duration(dtype) or t.is_time64(dtype):
        base = "long"  # durations and times of day: their count of the type's unit
    elif t.is_float32(dtype):
        base = "float"
    elif t.is_float64(dtype):
        base = "double"
    elif t.is_string(dtype) or t.is_large_string(dtype):
        base = "string"
    elif t.is_binary(dtype) or t.is_large_binary(dtype):
        base = "bytes"
    elif t.is_decimal(dtype):
        base = {"type": "bytes", "logicalType": "decimal",
                "precision": dtype.precision, "scale": dtype.scale}
    elif t.is_date32(dtype):
        base = {"type": "int", "logicalType": "date"} if logical else "int"
    elif t.is_timestamp(dtype):  # a count of the type's unit (Spark's: microseconds)
        kind = "timestamp-micros" if dtype.tz else "local-timestamp-micros"
        base = {"type": "long", "logicalType": kind} if logical and dtype.unit == "us" \
            else "long"
    elif t.is_list(dtype) or t.is_large_list(dtype):
        base = {"type": "array", "items": _avro_type(dtype.value_type, (*path, "_i"),
                                                     f"{where}.element", logical)}
    elif t.is_map(dtype):
        # Avro maps only allow string keys; Spark maps allow any: store pairs.
        base = {"type": "array", "items": {
            "type": "record", "name": _record_name((*path, "_p")), "fields": [
                {"name": "key", "type": _avro_type(dtype.key_type, (*path, "_k"),
                                                   f"{where}.key", logical)},
                {"name": "value", "type": _avro_type(dtype.item_type, (*path, "_v"),
                                                     f"{where}.value", logical)},
            ]}}
    elif t.is_struct(dtype):
        base = {"type": "record", "name": _record_name((*path, "_r")), "fields": [
            {"name": f.name, "type": _avro_type(f.type, (*path, "_n" + _escape(f.name)),
                                                f"{where}.{f.name}", logical)}
            for f in dtype
        ]}
    else:
        raise ConfigError(f"column {where!r}: Arrow type {dtype} has no Avro mapping")
    return ["null", base]


def avro_schema(schema: pa.Schema, logical: bool = True) -> dict[str, Any]:
    """The Avro record schema of a table's Arrow schema (``logical=False``: the one the
    codec parses, dates and timestamps as their plain numbers, the same bytes)."""
    return {"type": "record", "name": "row", "fields": [
        {"name": f.name, "type": _avro_type(f.type, ("_n" + _escape(f.name),), f.name,
                                            logical)}
        for f in schema
    ]}


def _physical(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with dates, timestamps, durations and times as their integers: the
    values the codec hands fastavro (``datetime`` cannot hold every Spark timestamp)."""
    t = pa.types
    if t.is_date32(dtype):
        return pa.int32()
    if t.is_timestamp(dtype) or t.is_duration(dtype) or t.is_time64(dtype):
        return pa.int64()
    if t.is_list(dtype):
        return pa.list_(dtype.value_field.with_type(_physical(dtype.value_type)))
    if t.is_large_list(dtype):
        return pa.large_list(dtype.value_field.with_type(_physical(dtype.value_type)))
    if t.is_map(dtype):
        return pa.map_(dtype.key_field.with_type(_physical(dtype.key_type)),
                       dtype.item_field.with_type(_physical(dtype.item_type)))
    if t.is_struct(dtype):
        return pa.struct([f.with_type(_physical(f.type)) for f in dtype])
    return dtype


def _to_avro(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(dtype):
        return [{"key": _to_avro(k, dtype.key_type), "value": _to_avro(v, dtype.item_type)}
                for k, v in value]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_to_avro(v, dtype.value_type) for v in value]
    if pa.types.is_struct(dtype):
        return {f.name: _to_avro(value[f.name], f.type) for f in dtype}
    return value


def _from_avro(value: Any, dtype: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(dtype):
        return [(_from_avro(p["key"], dtype.key_type), _from_avro(p["value"], dtype.item_type))
                for p in value]
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return [_from_avro(v, dtype.value_type) for v in value]
    if pa.types.is_struct(dtype):
        return {f.name: _from_avro(value[f.name], f.type) for f in dtype}
    return value


class AvroCodec(PayloadCodec):
    """Schemaless Avro records (fastavro); the Avro schema comes from the table."""

    name = "avro"

    def __init__(self, schema: pa.Schema) -> None:
        import fastavro

        super().__init__(schema)
        self._fastavro = fastavro
        self._parsed = fastavro.parse_schema(avro_schema(schema, logical=False))
        self._physical = pa.schema([f.with_type(_physical(f.type)) for f in schema])

    def encode(self, batch: Batchish) -> bytes:
        if not batch.schema.equals(self.schema):
            raise DecodeError(f"batch schema {batch.schema} differs from the table's {self.schema}")
        out = io.BytesIO()
        out.write(_RAW_LEN.pack(batch.num_rows))
        types = [f.type for f in self._physical]
        names = self.schema.names
        plain = cast(batch, self._physical)
        for row in plain.to_pylist():
            record = {n: _to_avro(row[n], ty) for n, ty in zip(names, types, strict=False)}
            self._fastavro.schemaless_writer(out, self._parsed, record)
        return out.getvalue()

    def decode(self, payload: bytes | memoryview) -> list[pa.RecordBatch]:
        buf = io.BytesIO(bytes(payload))
        try:
            (count,) = _RAW_LEN.unpack(buf.read(4))
            rows = []
            types = [f.type for f in self._physical]
            names = self.schema.names
            for _ in range(count):
                rec = self._fastavro.schemaless_reader(buf, self._parsed, None)
                rows.append({n: _from_avro(rec[n], ty) for n, ty in zip(names, types, strict=False)})
        except (struct.error, EOFError, ValueError, TypeError, IndexError) as exc:
            raise DecodeError(f"payload is not Avro of the table's schema: {exc}") from exc
        if buf.tell() != len(buf.getbuffer()):
            raise DecodeError("avro payload has trailing bytes")
        table = cast(pa.Table.from_pylist(rows, schema=self._physical), self.schema)
        return table.to_batches() or [pa.RecordBatch.from_pylist([], schema=self.schema)]


CODECS: dict[str, type[PayloadCodec]] = {c.name: c for c in (ArrowCodec, AvroCodec, RawCodec)}


def codec_for(name: str, schema: pa.Schema) -> PayloadCodec:
    """Build a codec by name; unknown names list the known ones."""
    try:
        cls = CODECS[name]
    except KeyError:
        raise ConfigError(
            f"unknown payload format {name!r}; valid: {', '.join(sorted(CODECS))}"
        ) from None
    return cls(schema)
