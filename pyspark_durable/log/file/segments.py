"""Segments: the files a log's frames live in, how they are indexed, and the rules for
what is read, what is truncated and what is damage.

A segment is named by its first offset (``{base:020d}.seg``) and holds consecutive
frames from it. Scanning indexes each frame's byte position, checking its length,
CRC and offset; a sealed segment (another follows) must end exactly where the next
begins.

**The acknowledged end decides** (:func:`scan_segment`). An append is acknowledged
only after its frames were fsync'd *and then* the ``acked`` record "every offset below
N is acknowledged" was fsync'd. So:

* Nothing at or past N is ever indexed: readers stop at N. What lies past N is the
  writers' (:mod:`.log`, "shared syncs"): whole appends waiting for a sync another
  writer shares, which stay, and what a writer cuts: a torn write, and everything past
  N after a failed sync or one whose process died (after a failed fsync the kernel may
  already have dropped those pages, so adopting them would acknowledge bytes the disk
  may not hold: PostgreSQL's "fsyncgate").
* A bad frame *below* N is damage to acknowledged data, and it stays local: the
  offsets it covers are indexed as damaged (a read of one raises
  :class:`CorruptEntryError` naming the segment, byte and offset), the scan resumes at
  the next valid frame, and every other entry of the segment still reads. Damage is
  never truncated and never skipped silently. A log that ends before N has lost its
  last entries: they are damaged the same way.
* A log without a readable ``acked`` mark (written before the mark existed, or with
  both slots damaged) keeps the older rule, :func:`judge_bad_frame`: a bad last frame
  with nothing valid after it is a torn write, anything else is corruption.
"""

from __future__ import annotations

import bisect
import enum
import logging
import mmap
import os
import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log.base import merge_ranges
from pyspark_durable.log.file.disk import file_size, size_of
from pyspark_durable.log.file.frames import (
    BODY_HEAD,
    FRAME_HEAD,
    MAX_BODY,
    MIN_BODY,
    SMALL_BODY,
    crc32,
    frame_size,
)
from pyspark_durable.log.file.freed import FreedFrames

log = logging.getLogger(__package__)

SEGMENT_SUFFIX = ".seg"
READ_CHUNK_BYTES = 1 << 20
RECENT_BYTES = 128 << 10  # frame bodies a segment keeps from its last scans (Segment.recent)


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


@dataclass
class Segment:
    """One segment file. Its ``path`` is made when first used: a log of hundreds of
    segments is listed at every open, and a read touches only the few it reaches."""

    base: int
    folder: Path
    positions: array = field(default_factory=lambda: array("q"))  # byte position per entry
    end: int = 0  # byte position after the last known-good frame
    size: int = 0  # the file's size at the last scan (a writer under the lock reads it)
    scanned: bool = False
    inode: int = -1  # the file's identity: a file recreated under the same name is new
    head: bytes = b""  # its first frame's length and CRC: an inode number can be reused
    damaged: dict[int, str] = field(default_factory=dict)  # offset -> why it cannot be read
    # the ``freed`` file's records of this segment, by first offset (a scan steps over
    # them), and those that match the frames as indexed: freed offset ranges, ascending
    claims: dict[int, FreedFrames] = field(default_factory=dict)
    freed: list[tuple[int, int]] = field(default_factory=list)
    applied: frozenset[FreedFrames] = frozenset()  # the claims behind ``freed``
    # bodies of small frames that tail scans found new and checked, by offset, until a
    # read takes them (once: a second read goes to the file): a catch-up reads what its
    # refresh just scanned (other processes' records) without reading and checking it
    # again. At most RECENT_BYTES kept since the last reset (the older scans' go first)
    recent: dict[int, bytes] = field(default_factory=dict, repr=False)
    recent_bytes: int = 0
    _path: Path | None = field(default=None, repr=False)

    @property
    def path(self) -> Path:
        if self._path is None:
            self._path = self.folder / segment_name(self.base)
        return self._path

    def check_file(self) -> tuple[bool, int | None]:
        """Is the file at ``path`` still the one indexed (same first frame, not shorter)?
        And its size, if this read it: a scan under the same lock need not open it again."""
        if len(self.head) < FRAME_HEAD.size:
            return True, None  # nothing indexed from it yet
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return True, None  # gone: the caller's listing decides
        try:
            size = size_of(fd)
            return os.pread(fd, FRAME_HEAD.size, 0) == self.head and size >= self.end, size
        finally:
            os.close(fd)

    @property
    def count(self) -> int:
        return len(self.positions)

    def position(self, offset: int) -> int:
        """The byte where the frame of an indexed ``offset`` starts (its end, past the last)."""
        i = offset - self.base
        return self.positions[i] if i < len(self.positions) else self.end

    def keep_recent(self, kept: Kept) -> None:
        """Remember the frame bodies a scan checked (``kept``); past ``RECENT_BYTES`` the
        older scans' go first."""
        if self.recent_bytes + kept.size > RECENT_BYTES:
            self.forget_recent()
        self.recent.update(kept.bodies)
        self.recent_bytes += kept.size

    def forget_recent(self) -> None:
        self.recent, self.recent_bytes = {}, 0

    def freed_until(self, offset: int) -> int | None:
        """The end of the freed range holding ``offset``, or None if it is not freed."""
        i = bisect.bisect_right(self.freed, (offset, 1 << 63)) - 1
        if i >= 0 and self.freed[i][0] <= offset < self.freed[i][1]:
            return self.freed[i][1]
        return None

    def settle_freed(self) -> list[FreedFrames]:
        """Apply the claims whose frames are indexed and lie where they say; return
        those that contradict the index (not applied: their frames read as they lie)."""
        good, wrong = [], []
        for c in self.claims.values():
            if c.end > self.base + self.count:
                continue  # not indexed yet: judged once the scan reaches it
            fits = c.start >= self.base and self.position(c.start) == c.pos and \
                self.position(c.end) == c.end_pos and \
                not any(o in self.damaged for o in range(c.start, c.end))
            (good if fits else wrong).append(c)
        self.freed = merge_ranges((c.start, c.end) for c in good)
        self.applied = frozenset(good)
        return wrong


class Kept:
    """Frame bodies a scan read and checked, by offset, up to ``RECENT_BYTES`` in all
    (a catch-up with more keeps its first ones only)."""

    def __init__(self) -> None:
        self.bodies: dict[int, bytes] = {}
        self.size = 0

    def add(self, offset: int, body: bytes) -> None:
        if len(body) <= SMALL_BODY and self.size + len(body) <= RECENT_BYTES:
            self.bodies[offset] = body
            self.size += len(body)


@dataclass(frozen=True)
class BadFrame:
    """The first frame a scan could not index: where it starts and ends, and why."""

    pos: int
    end: int
    reason: str


def walk_frames(f: BinaryIO, pos: int, size: int, expect: int,
                stop: int | None = None,
                claims: dict[int, FreedFrames] | None = None,
                keep: Kept | None = None,
                ) -> tuple[array, int, int, BadFrame | None]:
    """Index the frames from byte ``pos`` (holding offset ``expect``) to ``size``, and
    never the frame of offset ``stop`` or later. Freed frames (``claims``, by first
    offset) that start where the walk is are stepped over unread: their bytes may be a
    punched hole. Each good frame's body is offered to ``keep``, if given.

    Returns (their positions, the byte after the last good one, the next offset, the
    bad frame that stopped the walk or None).
    """
    f.seek(pos)
    found = array("q")
    while pos < size and expect != stop:
        claim = claims.get(expect) if claims else None
        if claim is not None and claim.pos == pos and claim.end_pos <= size and \
                (stop is None or claim.end <= stop):
            found.extend([pos] * (claim.end - expect))
            pos, expect = claim.end_pos, claim.end
            f.seek(pos)
            continue
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
        if crc32(body) != crc:
            return found, pos, expect, BadFrame(pos, end, "CRC mismatch")
        held = BODY_HEAD.unpack_from(body)[0]
        if held != expect:
            return found, pos, expect, BadFrame(pos, end,
                                                f"frame holds offset {held}, expected {expect}")
        if keep is not None:
            keep.add(expect, body)
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
                if fits and crc32(m[hit : hit + length]) == crc:
                    return True
            hit = m.find(needle, hit + 1)
    return False


def next_frame(f: Any, pos: int, size: int, expect: int, stop: int) -> tuple[int, int] | None:
    """The first complete, CRC-valid frame after byte ``pos`` holding an offset in
    (``expect``, ``stop``): (its byte position, its offset), or None.

    Offsets are tried in rising order, each a search for its big-endian bytes with mmap
    (the file is never loaded into memory); only a damaged segment runs this.
    """
    if size <= pos:
        return None
    with mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ) as m:
        for offset in range(expect + 1, stop):
            needle = struct.pack(">Q", offset)
            hit = m.find(needle, pos + FRAME_HEAD.size + 1)
            while hit != -1:
                head = hit - FRAME_HEAD.size
                length, crc = FRAME_HEAD.unpack_from(m, head)
                if MIN_BODY <= length <= size - hit and crc32(m[hit : hit + length]) == crc:
                    return head, offset
                hit = m.find(needle, hit + 1)
    return None


def scan_segment(seg: Segment, *, acked: int | None, floor: int, exclusive: bool, tail: bool,
                 end_offset: int | None, namespace: str, name: str,
                 size: int | None = None) -> None:
    """Index frames of ``seg`` from its known end, by the rules of the module docstring.

    ``tail``: ``seg`` is the last segment and ``acked`` its log's acknowledged end
    (None: no trusted mark, the older rule applies with ``floor`` as the acknowledged
    end); ``exclusive``: the caller holds
    the writers' lock, so the older rule's torn tail is truncated; ``end_offset``:
    a sealed segment's next base, which it must end at exactly; ``size``: the file's
    size if the caller just read it under the lock it holds (:meth:`Segment.check_file`).
    """
    where = {"namespace": namespace, "log": name}
    size = seg.size = _size_of(seg, where) if size is None or size < seg.end else size
    expect = seg.base + seg.count
    stop = (acked if acked is not None else None) if tail else end_offset
    if stop is not None and stop < expect:
        # the mark went back below what was indexed: the log was restored from an
        # older copy or its mark damaged; what was indexed stays, nothing more is
        stop = expect
    limit = stop if stop is not None else (max(floor, expect) if tail else None)
    if seg.scanned and (seg.end >= size or expect == stop):
        return  # nothing new below the mark (what lies past it is the writers', log.py)
    with open(seg.path, "rb") as f:
        if not seg.head:
            seg.head = f.read(FRAME_HEAD.size)
        # Bodies are kept only of frames new since this handle's last look: a segment
        # scanned for the first time (an open) is not about to be read whole, and its
        # frames may have been damaged since they were written.
        kept = Kept() if tail and seg.scanned else None
        # Positions are indexed only once the scan succeeded: a scan that raises
        # (corruption) must leave the index as it was, or the next scan would resume at
        # the old end with a wrong expected offset and report a wrong place (and the
        # high watermark would count unchecked frames).
        positions, damaged, pos, expect = _walk(seg, f, size, expect, stop, limit, tail=tail,
                                                floor=floor, exclusive=exclusive, where=where,
                                                keep=kept)
        seg.positions.extend(positions)
        seg.damaged.update(damaged)
        seg.end = pos
        seg.scanned = True
        if kept is not None and kept.bodies:
            seg.keep_recent(kept)


def _size_of(seg: Segment, where: dict[str, str]) -> int:
    """The segment file's size: typed errors if it was deleted or cut below what was indexed."""
    try:
        size = file_size(seg.path)
    except FileNotFoundError:
        raise OffsetOutOfRange(f"segment {seg.path.name} was deleted (below the low watermark)",
                               **where) from None
    if size < seg.end:
        raise CorruptEntryError(f"segment {seg.path.name} shrank to {size} bytes below its "
                                f"indexed end {seg.end} (cut)", **where)
    return size


def _walk(seg: Segment, f: Any, size: int, expect: int, stop: int | None,
          limit: int | None, *, tail: bool, floor: int, exclusive: bool,
          where: dict[str, str], keep: Kept | None = None,
          ) -> tuple[array, dict[int, str], int, int]:
    """Walk the frames of ``seg`` from its indexed end: (positions, damaged offsets with
    why, end byte, next offset). Below ``limit`` (an acknowledged end or the next
    segment's base) a bad frame is damage, recorded for the offsets it hides up to the
    next valid frame, and missing entries at the end are too; past it the older rule
    judges (:func:`_judge_without_mark`)."""
    positions, damaged, pos = array("q"), {}, seg.end
    while True:
        found, pos, expect, bad = walk_frames(f, pos, size, expect, stop, seg.claims, keep)
        positions.extend(found)
        if bad is None:
            break
        if limit is None or expect >= limit:  # past any acknowledged end: the older rule
            _judge_without_mark(seg, f, bad, size, expect, tail=tail, floor=floor,
                                exclusive=exclusive, where=where)
            break
        resync = next_frame(f, bad.pos, size, expect, limit)
        upto, nxt = resync[1] if resync else limit, resync[0] if resync else size
        why = (f"{bad.reason} at byte {bad.pos} of segment {seg.path.name} (expected "
               f"offset {expect})")
        if tail:
            why += f"; entries below {limit} were acknowledged, so this is damage"
        for offset in range(expect, upto):
            damaged[offset] = why
            positions.append(bad.pos)
        pos, expect = nxt, upto
    if limit is not None and expect < limit and pos >= size:
        what = ("entries below {limit} were acknowledged" if tail
                else "the next segment starts at offset {limit}").format(limit=limit)
        why = (f"the segment {seg.path.name} ends at offset {expect} (byte {pos}) but "
               f"{what}: entries are missing")
        for offset in range(expect, limit):
            damaged[offset] = why
            positions.append(pos)
        expect = limit
    return positions, damaged, pos, expect


def truncate_durably(path: Path, at: int) -> None:
    """Cut ``path`` to ``at`` bytes and fsync it, so the cut survives a crash."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, at)
        os.fsync(fd)
    finally:
        os.close(fd)


def _judge_without_mark(seg: Segment, f: Any, bad: BadFrame, size: int, expect: int, *,
                        tail: bool, floor: int, exclusive: bool, where: dict[str, str]) -> None:
    """The older rule for a log without a trusted ``acked`` mark: a torn tail past
    ``floor`` is truncated (by a writer), anything else raises."""
    verdict = judge_bad_frame(tail=tail, expect=expect, acked=floor,
                              nothing_valid_after=lambda: only_tail(f, bad, size, expect))
    if verdict is not Verdict.TORN:
        raise CorruptEntryError(f"{bad.reason} at byte {bad.pos} of segment "
                                f"{seg.path.name} (expected offset {expect})", **where,
                                offset=expect)
    if exclusive:
        log.warning("namespace=%s log=%s: truncating torn tail of %s at byte %d "
                    "(%d bytes, %s); no acknowledged entry is lost", where["namespace"],
                    where["log"], seg.path.name, bad.pos, size - bad.pos, bad.reason)
        truncate_durably(seg.path, bad.pos)
