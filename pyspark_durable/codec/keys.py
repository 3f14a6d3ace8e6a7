"""The record key and value of an entry (docs/record-format.md, "Region entries").

Key, 26 bytes, big-endian so that byte order is (region, table, sequence) order::

    +---------------+----------------+---------------+-------------------+--------------+
    | namespace(u8) | region_id(u64) | table_id(u64) | sequence_num(u64) | version(u8)  |
    +---------------+----------------+---------------+-------------------+--------------+
      0               1                9               17                  25

Value::

    +-------------+----------------------------------------------+
    | version(u8) | payload (Arrow IPC stream | Avro | raw bytes) |
    +-------------+----------------------------------------------+

Decoding checks the version first, then the namespace and region the caller
expects, and names what it expected, what it found and where (region, offset). Every
version an earlier release wrote is read (``KEY_VERSIONS_READ``, ``VALUE_VERSIONS_READ``:
only 0 so far); a newer one is :class:`NewerVersion`, so the first format change makes a
release refuse its successor's WAL by name, not its predecessor's.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pyspark_durable.errors import DecodeError, InvalidVersion, NewerVersion

KEY_VERSION = 0  # written
VALUE_VERSION = 0
KEY_VERSIONS_READ = frozenset({0})  # every version a release of this project wrote
VALUE_VERSIONS_READ = frozenset({0})
U64_MAX = (1 << 64) - 1

_KEY = struct.Struct(">BQQQB")
KEY_SIZE = _KEY.size
assert KEY_SIZE == 26, KEY_SIZE  # the on-disk and on-wire format depends on it


@dataclass(frozen=True, slots=True)
class EntryKey:
    """Where an entry belongs: namespace id, region, table and sequence number."""

    namespace_id: int
    region_id: int
    table_id: int
    sequence_num: int

    def __post_init__(self) -> None:
        if not 0 <= self.namespace_id <= 0xFF:
            raise DecodeError(f"namespace id {self.namespace_id} is not a u8")
        for name in ("region_id", "table_id", "sequence_num"):
            value = getattr(self, name)
            if not 0 <= value <= U64_MAX:
                raise DecodeError(f"{name} {value} is not a u64")

    def encode(self) -> bytes:
        return _KEY.pack(
            self.namespace_id, self.region_id, self.table_id, self.sequence_num, KEY_VERSION
        )


def decode_key(
    data: bytes,
    *,
    expect_namespace_id: int | None = None,
    expect_region_id: int | None = None,
    offset: int | None = None,
) -> EntryKey:
    """Decode a key, checking its size, version and the expected namespace/region."""
    where = {"region": expect_region_id, "offset": offset}
    if data is None or len(data) != KEY_SIZE:
        size = None if data is None else len(data)
        raise DecodeError(f"key must be {KEY_SIZE} bytes, found {size}", **where)
    namespace_id, region_id, table_id, sequence_num, version = _KEY.unpack(data)
    if version not in KEY_VERSIONS_READ:
        raise _unknown("key", version, KEY_VERSIONS_READ, where)
    if expect_namespace_id is not None and namespace_id != expect_namespace_id:
        raise DecodeError(
            f"key belongs to namespace id {namespace_id}, expected {expect_namespace_id}", **where
        )
    if expect_region_id is not None and region_id != expect_region_id:
        raise DecodeError(
            f"key belongs to region {region_id}, expected {expect_region_id}", **where
        )
    return EntryKey(namespace_id, region_id, table_id, sequence_num)


VALUE_PREFIX = bytes((VALUE_VERSION,))


def encode_value(payload: bytes) -> bytes:
    """Prefix a payload with the value version byte."""
    return VALUE_PREFIX + payload


def decode_value(
    data: bytes, *, region_id: int | None = None, offset: int | None = None
) -> memoryview:
    """Return the payload of a value after checking its version byte (zero copy)."""
    if not data:
        raise DecodeError("value is empty, expected a version byte", region=region_id, offset=offset)
    if data[0] not in VALUE_VERSIONS_READ:
        raise _unknown("value", data[0], VALUE_VERSIONS_READ,
                       {"region": region_id, "offset": offset})
    return memoryview(data)[1:]


def _unknown(element: str, found: int, read: frozenset[int],
             where: dict[str, int | None]) -> InvalidVersion:
    """Newer than every version read: a newer release wrote it; else never written."""
    if found > max(read):
        return NewerVersion(element, found, max(read), **where)
    return InvalidVersion(f"{element} version: expected one of {sorted(read)}, given {found}",
                          **where)
