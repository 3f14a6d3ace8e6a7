"""How a namespace snapshot is stored: a header with the payload's CRC and length.

The payload (the state, format ``SNAPSHOT_VERSION`` of :mod:`.state`) is documented in
docs/record-format.md; this envelope makes every byte of it checked before it is read.
"""

from __future__ import annotations

import struct
import zlib

from pyspark_durable.errors import CorruptEntryError

SNAPSHOT_NAME = "wal"
SNAPSHOT_HEAD = struct.Struct(">4sII")  # magic | crc32 of the payload | payload length
SNAPSHOT_MAGIC = b"DWS2"


def seal_snapshot(payload: bytes) -> bytes:
    """A snapshot as stored: a header with the payload's CRC and length, then the payload."""
    return SNAPSHOT_HEAD.pack(SNAPSHOT_MAGIC, zlib.crc32(payload), len(payload)) + payload


def open_snapshot(raw: bytes, namespace: str, version: int | None) -> bytes:
    """The payload of a stored snapshot, checked; every byte is covered by the CRC."""
    where = {"namespace": namespace, "snapshot": SNAPSHOT_NAME, "version": version}
    if len(raw) < SNAPSHOT_HEAD.size:
        raise CorruptEntryError(f"snapshot is {len(raw)} bytes, shorter than its header",
                                **where)
    magic, crc, length = SNAPSHOT_HEAD.unpack_from(raw)
    payload = raw[SNAPSHOT_HEAD.size:]
    if magic != SNAPSHOT_MAGIC:
        raise CorruptEntryError(f"snapshot starts with {magic!r}, expected {SNAPSHOT_MAGIC!r} "
                                "(bytes 0-3)", **where)
    if length != len(payload):
        raise CorruptEntryError(f"snapshot header says {length} payload bytes, the snapshot "
                                f"holds {len(payload)} (bytes 8-11; truncated or damaged)",
                                **where)
    if zlib.crc32(payload) != crc:
        raise CorruptEntryError(f"snapshot payload fails its CRC (stored {crc:08x}, computed "
                                f"{zlib.crc32(payload):08x}; bytes 4-7 or 12-{len(raw) - 1})",
                                **where)
    return payload
