"""Segments: the files a log's frames live in, how they are indexed, and the torn-tail rule.

A segment is named by its first offset (``{base:020d}.seg``) and holds consecutive
frames from it. Scanning indexes each frame's byte position, checking its length,
CRC and offset; a sealed segment (another follows) must end exactly where the next
begins.

**Torn tails vs. damage: the rule** (:func:`judge_bad_frame`). An append is
acknowledged only after its frames were fsync'd *and* then the ``acked`` record
saying "every offset below N is durable" was fsync'd. A crash (power loss) can leave
a partial last frame: if its offset is at or above the acknowledged N it was never
acknowledged, and the first writer to take the lock truncates it and logs a warning
(readers stop before it). A bad frame *below* N, or a log that ends before N, is
damage to acknowledged data: an error naming the segment and byte, never a
truncation. A frame that fails its CRC with valid data after it is corruption too:
never a silent skip. (Kafka keeps a recovery point for the same reason; TigerBeetle
keeps redundant headers.)
"""

from __future__ import annotations

import enum
import logging
import mmap
import os
import struct
import zlib
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log.file.frames import (
    BODY_HEAD,
    FRAME_HEAD,
    MAX_BODY,
    MIN_BODY,
    frame_size,
)

log = logging.getLogger(__package__)

SEGMENT_SUFFIX = ".seg"
READ_CHUNK_BYTES = 1 << 20


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


@dataclass
class Segment:
    base: int
    path: Path
    positions: array = field(default_factory=lambda: array("q"))  # byte position per entry
    end: int = 0  # byte position after the last known-good frame
    scanned: bool = False
    inode: int = -1  # the file's identity: a file recreated under the same name is new
    head: bytes = b""  # its first frame's length and CRC: an inode number can be reused

    def same_file(self) -> bool:
        """Is the file at ``path`` still the one indexed (same first frame, not shorter)?"""
        if len(self.head) < FRAME_HEAD.size:
            return True  # nothing indexed from it yet
        try:
            with open(self.path, "rb") as f:
                return f.read(FRAME_HEAD.size) == self.head and \
                    os.fstat(f.fileno()).st_size >= self.end
        except FileNotFoundError:
            return True  # gone: the caller's listing decides

    @property
    def count(self) -> int:
        return len(self.positions)


@dataclass(frozen=True)
class BadFrame:
    """The first frame a scan could not index: where it starts and ends, and why."""

    pos: int
    end: int
    reason: str


def walk_frames(f: BinaryIO, pos: int, size: int,
                expect: int) -> tuple[array, int, int, BadFrame | None]:
    """Index the frames from byte ``pos`` (holding offset ``expect``) to ``size``.

    Returns (their positions, the byte after the last good one, the next offset, the
    bad frame that stopped the walk or None).
    """
    f.seek(pos)
    found = array("q")
    while pos < size:
        head = f.read(FRAME_HEAD.size)
        if len(head) < FRAME_HEAD.size:
            return found, pos, expect, BadFrame(pos, pos + FRAME_HEAD.size,
                                                "partial frame header")
        length, crc = FRAME_HEAD.unpack(head)
        end = pos + frame_size(length)
        if not MIN_BODY <= length <= MAX_BODY or end > size:
            return found, pos, expect, BadFrame(
                pos, end, f"frame length {length} runs past the end of the segment")
        body = f.read(length)
        if zlib.crc32(body) != crc:
            return found, pos, expect, BadFrame(pos, end, "CRC mismatch")
        held = BODY_HEAD.unpack_from(body)[0]
        if held != expect:
            return found, pos, expect, BadFrame(pos, end,
                                                f"frame holds offset {held}, expected {expect}")
        found.append(pos)
        pos = end
        expect += 1
    return found, pos, expect, None


class Verdict(enum.Enum):
    TORN = "a torn, never acknowledged tail: truncated by the next writer"
    ACKNOWLEDGED = "damage to acknowledged entries"
    CORRUPT = "corruption with data after it"


def judge_bad_frame(*, tail: bool, expect: int, acked: int,
                    nothing_valid_after: Callable[[], bool]) -> Verdict:
    """The torn-tail rule (module docstring) for a bad frame holding offset ``expect``.

    ``tail``: the frame is in the last segment; ``acked``: every offset below it was
    acknowledged; ``nothing_valid_after`` says whether only a torn write's remains
    follow the frame (asked only when the answer matters: it reads the file).
    """
    if tail and expect < acked:
        return Verdict.ACKNOWLEDGED
    if not tail or not nothing_valid_after():
        return Verdict.CORRUPT
    return Verdict.TORN


def only_tail(f: Any, bad: BadFrame, size: int, expect: int) -> bool:
    """A bad frame is a torn tail if only zeros follow it, or if it reaches the end
    and no valid frame of a later offset starts after it."""
    if bad.end < size:
        f.seek(bad.end)
        while chunk := f.read(READ_CHUNK_BYTES):
            if chunk.strip(b"\0"):
                return False
        return True
    # A damaged length field makes a frame in the middle seem to run past the end
    # of the segment, exactly like a torn last write; truncating it would drop every
    # acknowledged entry after it. A torn write has nothing valid after it.
    return not frame_follows(f, bad.pos, size, expect + 1)


def frame_follows(f: Any, pos: int, size: int, offset: int) -> bool:
    """Does a complete, CRC-valid frame holding ``offset`` start after byte ``pos``?

    Looks for the big-endian offset (the first field of a body) with mmap, so the
    segment is never loaded into memory; only an error path runs it.
    """
    needle = struct.pack(">Q", offset)
    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
        hit = m.find(needle, pos + FRAME_HEAD.size + 1)
        while hit != -1:
            head = hit - FRAME_HEAD.size
            if head > pos:
                length, crc = FRAME_HEAD.unpack_from(m, head)
                fits = MIN_BODY <= length <= size - hit
                if fits and zlib.crc32(m[hit : hit + length]) == crc:
                    return True
            hit = m.find(needle, hit + 1)
    return False


def scan_segment(seg: Segment, *, acked: int, exclusive: bool, tail: bool,
                 end_offset: int | None, namespace: str, name: str) -> None:
    """Index frames of ``seg`` from its known end; apply the torn-tail rule.

    ``tail``: ``seg`` is the last segment and ``acked`` its log's acknowledged end;
    ``exclusive``: the caller holds the writers' lock, so a torn tail is truncated;
    ``end_offset``: a sealed segment's next base, which it must end at exactly.
    """
    where = {"namespace": namespace, "log": name}
    try:
        size = os.path.getsize(seg.path)
    except FileNotFoundError:
        raise OffsetOutOfRange(f"segment {seg.path.name} was deleted (below the low watermark)",
                               **where) from None
    if size < seg.end:
        raise CorruptEntryError(f"segment {seg.path.name} shrank to {size} bytes below its "
                                f"indexed end {seg.end} (cut)", **where)
    if seg.end >= size and seg.scanned:
        return
    with open(seg.path, "rb") as f:
        if not seg.head:
            seg.head = f.read(FRAME_HEAD.size)
        # Positions are indexed only once the scan succeeded: a scan that raises
        # (corruption) must leave the index as it was, or the next scan would resume at
        # the old end with a wrong expected offset and report a wrong place (and the
        # high watermark would count unchecked frames).
        found, pos, expect, bad = walk_frames(f, seg.end, size, seg.base + seg.count)
        if bad is not None:
            verdict = judge_bad_frame(tail=tail, expect=expect, acked=acked,
                                      nothing_valid_after=lambda: only_tail(f, bad, size, expect))
            if verdict is Verdict.ACKNOWLEDGED:
                raise CorruptEntryError(
                    f"{bad.reason} at byte {bad.pos} of segment {seg.path.name} (expected "
                    f"offset {expect}): entries below {acked} were acknowledged, so this is "
                    "damage, not a torn write", **where, offset=expect)
            if verdict is Verdict.CORRUPT:
                raise CorruptEntryError(f"{bad.reason} at byte {bad.pos} of segment "
                                        f"{seg.path.name} (expected offset {expect})", **where,
                                        offset=expect)
            if exclusive:
                log.warning("namespace=%s log=%s: truncating torn tail of %s at byte %d "
                            "(%d bytes, %s); no acknowledged entry is lost", namespace, name,
                            seg.path.name, bad.pos, size - bad.pos, bad.reason)
                os.truncate(seg.path, bad.pos)
                with open(seg.path, "rb+") as g:
                    os.fsync(g.fileno())
        if tail and expect < acked:
            raise CorruptEntryError(
                f"the log ends at offset {expect} (byte {pos} of segment {seg.path.name}) "
                f"but entries below {acked} were acknowledged: entries are missing",
                **where, offset=expect)
        if end_offset is not None and expect != end_offset:
            raise CorruptEntryError(
                f"segment {seg.path.name} ends at offset {expect} (byte {pos}) but the "
                f"next segment starts at offset {end_offset}: entries are missing",
                **where, offset=expect)
        seg.positions.extend(found)
        seg.end = pos
        seg.scanned = True
