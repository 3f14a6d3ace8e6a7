"""Frames read back: a small body read whole and parsed from memory, a large one piece by
piece; both give the entry written, and neither takes damage for an entry."""

from __future__ import annotations

import io
import struct

import pytest

from pyspark_durable.log.base import Record
from pyspark_durable.log.file.frames import (
    BODY_HEAD,
    FRAME_HEAD,
    SMALL_BODY,
    crc32,
    encode_frame,
    read_body,
)


def read_frame(frame: bytes):
    f = io.BytesIO(frame)
    length, crc = FRAME_HEAD.unpack(f.read(FRAME_HEAD.size))
    return read_body(f, length, crc)


def record(value_size: int) -> Record:
    return Record(b"key-7", bytes(range(256)) * (value_size // 256) + b"v" * (value_size % 256),
                  (("attempt", b"a1"), ("n", b"12345")))


@pytest.mark.parametrize("value_size", [0, 10, SMALL_BODY - 200, SMALL_BODY + 1, 3 * SMALL_BODY])
def test_a_frame_reads_back_as_written_on_either_side_of_the_small_body_size(value_size):
    """This tests that a frame with a key and headers reads back as the entry written,
    whether its body is read whole (small) or piece by piece (large)."""
    rec = record(value_size)
    entry = read_frame(encode_frame(41, 1_700_000_000_123, rec))
    assert (entry.offset, entry.timestamp_ms, entry.key, entry.value, entry.headers) == \
        (41, 1_700_000_000_123, rec.key, rec.value, rec.headers)
    assert type(entry.value) is bytes and type(entry.key) is bytes


@pytest.mark.parametrize("value_size", [40, SMALL_BODY + 40])
def test_every_flipped_bit_of_a_body_reads_as_damage(value_size):
    """This tests that flipping any one bit of a frame's body (a small one read whole, a
    large one's first and last 300 bytes) makes the read say damaged, never an entry."""
    frame = bytearray(encode_frame(3, 5, record(value_size)))
    body = range(FRAME_HEAD.size, len(frame))
    where = body if value_size < SMALL_BODY else [*body[:300], *body[-300:]]
    for at in where:
        for bit in range(8):
            frame[at] ^= 1 << bit
            assert read_frame(bytes(frame)) is None, (at, bit)
            frame[at] ^= 1 << bit
    assert read_frame(bytes(frame)) is not None


def test_a_short_body_and_lying_field_lengths_read_as_damage_not_an_error():
    """This tests that a body shorter than its length field says, and a body whose CRC
    holds but whose key or header lengths run past its end, read as damaged (None): no
    exception, no entry made of the wrong bytes."""
    frame = encode_frame(3, 5, record(100))
    assert read_frame(frame[:-1]) is None  # the file ends inside the body
    for key_len, n_headers in ((10_000, 0), (0, 1), (5, 9)):
        body = BODY_HEAD.pack(3, 5, key_len, n_headers) + b"k" * 5 + struct.pack(">HI", 3, 99)
        crafted = FRAME_HEAD.pack(len(body), crc32(body)) + body
        assert read_frame(crafted) is None, (key_len, n_headers)
    # a header name cut inside a character, its value running past the end
    body = BODY_HEAD.pack(3, 5, 0, 1) + struct.pack(">HI", 2, 50) + "é".encode()[:1]
    assert read_frame(FRAME_HEAD.pack(len(body), crc32(body)) + body) is None
