"""Frames: one log entry as bytes on disk, and back.

Frame of one entry (big-endian)::

    +-----------+-----------+-------------------------------------------------------+
    | len (u32) | crc32(u32)| body: offset u64 | timestamp_ms u64 | key_len u16 |     |
    |           | of body   |       n_headers u16 | key | headers | value          |
    +-----------+-----------+-------------------------------------------------------+
    header: name_len u16 | value_len u32 | name | value
"""

from __future__ import annotations

import struct
from typing import BinaryIO

from pyspark_durable.log.base import Entry, Record

try:  # ISA-L's CRC-32 gives zlib's values ~4x as fast: every byte of an entry passes it
    # twice (written, read), and segments.py's scans use it too: one frame CRC in one place
    from isal.isal_zlib import crc32
except ModuleNotFoundError:  # pragma: no cover - the same function, slower
    from zlib import crc32

FRAME_HEAD = struct.Struct(">II")  # len, crc32 of the body
BODY_HEAD = struct.Struct(">QQHH")  # offset, timestamp_ms, key_len, n_headers
HEADER_HEAD = struct.Struct(">HI")  # name_len, value_len
MIN_BODY = BODY_HEAD.size
MAX_BODY = 1 << 30
SMALL_BODY = 64 << 10  # read whole and sliced: copying this much costs less than the calls


def frame_parts(offset: int, timestamp_ms: int, record: Record) -> tuple[bytes, bytes]:
    """One frame as (everything before the value, the value): the value is not copied."""
    key = bytes(record.key)
    parts = [BODY_HEAD.pack(offset, timestamp_ms, len(key), len(record.headers)), key]
    for name, value in record.headers:
        raw = name.encode()
        parts += [HEADER_HEAD.pack(len(raw), len(value)), raw, bytes(value)]
    head = b"".join(parts)
    value = record.value
    crc = crc32(value, crc32(head))
    return FRAME_HEAD.pack(len(head) + len(value), crc) + head, value


def encode_frame(offset: int, timestamp_ms: int, record: Record) -> bytes:
    head, value = frame_parts(offset, timestamp_ms, record)
    return head + bytes(value)


def frame_size(length: int) -> int:
    """Bytes a frame with a body of ``length`` bytes takes in its segment."""
    return FRAME_HEAD.size + length


def read_body(f: BinaryIO, length: int, crc: int) -> Entry | None:
    """Read a frame body of ``length`` bytes as an Entry, or None if it is damaged.

    A small body (a commits record, a short entry) is read with one call and parsed
    from memory: per frame, the calls cost more than the copy. A larger one is read
    piece by piece (CRC carried along), so the value, nearly all of it, lands in its
    own ``bytes`` straight from the file with no second copy.
    """
    if length <= SMALL_BODY:
        body = f.read(length)
        return parse_body(body, crc) if len(body) == length else None
    left, seen = length, 0

    def take(n: int) -> bytes | None:
        nonlocal left, seen
        data = f.read(n) if 0 <= n <= left else b""
        if len(data) != n:
            return None
        left -= n
        seen = crc32(data, seen)
        return data

    head = take(BODY_HEAD.size)
    if head is None:
        return None
    offset, ts, key_len, n_headers = BODY_HEAD.unpack(head)
    key = take(key_len)
    raw_headers = []
    for _ in range(n_headers):
        sizes = take(HEADER_HEAD.size)
        if sizes is None:
            return None
        name_len, value_len = HEADER_HEAD.unpack(sizes)
        raw_headers.append((take(name_len), take(value_len)))
    value = take(left)
    pieces = [key, value, *(p for pair in raw_headers for p in pair)]
    if seen != crc or any(p is None for p in pieces):
        return None
    return Entry(offset, key, value, tuple((n.decode(), v) for n, v in raw_headers), ts)


def parse_body(body: bytes, crc: int | None) -> Entry | None:
    """A frame body read whole, as an Entry, or None if it is damaged (its CRC, or
    fields that run past its end). ``crc`` None: a body a scan already checked."""
    if (crc is not None and crc32(body) != crc) or len(body) < MIN_BODY:
        return None
    offset, ts, key_len, n_headers = BODY_HEAD.unpack_from(body)
    pos = MIN_BODY + key_len
    if pos > len(body):
        return None
    key = body[MIN_BODY:pos]
    if not n_headers:  # a commits record, most entries: nothing to walk
        return Entry(offset, key, body[pos:], (), ts)
    headers = []
    for _ in range(n_headers):
        name_at = pos + HEADER_HEAD.size
        if name_at > len(body):
            return None
        name_len, value_len = HEADER_HEAD.unpack_from(body, pos)
        pos = name_at + name_len + value_len
        if pos > len(body):
            return None
        headers.append((body[name_at:name_at + name_len].decode(),
                        body[name_at + name_len:pos]))
    return Entry(offset, key, body[pos:], tuple(headers), ts)
