"""A handle's view of one file log's folder: its segments as this handle knows them,
caught up under the folder's flock with what other processes appended, deleted or
freed, and read from.

Every handle needs this, a writer's and a reader's alike; what only a writer does
(group commit, freeing single entries, deleting) is
:class:`~pyspark_durable.log.file.log.FileLog`'s, and its module docstring says why the
files are as they are.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log.base import Entry, Log, is_decimal
from pyspark_durable.log.file.disk import PRIVATE, Access, FileLock, create_empty, fsync_dir
from pyspark_durable.log.file.frames import FRAME_HEAD, frame_size, parse_body, read_body
from pyspark_durable.log.file.freed import FREED_FILE, FreedFrames, read_freed
from pyspark_durable.log.file.marks import read_acked, read_low, write_acked
from pyspark_durable.log.file.segments import (
    READ_CHUNK_BYTES,
    SEGMENT_SUFFIX,
    Segment,
    scan_segment,
    segment_name,
)

log = logging.getLogger(__package__)


class SegmentFolder(Log):
    """The segments of one log's folder, read by any process (see the module docstring)."""

    def __init__(self, namespace: str, name: str, path: Path, access: Access = PRIVATE) -> None:
        super().__init__(namespace, name)
        self.path = path
        self._lock_path = path / "lock"  # one Path: its string is made once, not per append
        self.access = access  # the mode of every file it makes (disk.Access)
        self._segments: list[Segment] = []
        self._low = 0
        self._state = threading.Lock()  # guards _segments and _low
        self._acked: int | None = None  # every offset below is acknowledged (the acked
        # file); None: no readable mark (a log from before the mark, or a damaged one)
        self._ack_seq = 0
        self._acked_floor = 0  # without a trusted mark: the highest offset known acknowledged
        self._freed: list[FreedFrames] = []  # the `freed` file's valid records (freed.py)
        self._freed_whole = 0  # where its whole records end
        self._freed_key: tuple[int, int] | None = None  # (inode, size) they were read at
        with self._locked(fcntl.LOCK_SH):
            self._refresh(exclusive=False)

    # -- locking and catching up ------------------------------------------------

    def _locked(self, mode: int) -> FileLock:
        return FileLock(self._lock_path, mode, self.access, namespace=self.namespace,
                        log=self.name)

    def _note(self, problem: str) -> None:
        if problem not in self.repairs:
            log.warning("namespace=%s log=%s: %s", self.namespace, self.name, problem)
            self.repairs.append(problem)

    def _torn(self, what: str) -> None:
        """A torn write no acknowledged entry depends on: logged, not kept as damage."""
        log.warning("namespace=%s log=%s: %s", self.namespace, self.name, what)

    def _refresh(self, exclusive: bool) -> None:
        """Catch up with what any process appended or deleted (caller holds the flock)."""
        self._ack_seq, floor, trusted = read_acked(self.path, self._note)
        self._acked, self._acked_floor = (floor if trusted else None), floor
        with os.scandir(self.path) as it:  # inodes: a recreated file is a new segment
            found = sorted((e.name, e.inode()) for e in it if e.name.endswith(SEGMENT_SUFFIX)
                           and is_decimal(e.name[: -len(SEGMENT_SUFFIX)]))
        bases = [int(n[: -len(SEGMENT_SUFFIX)]) for n, _ in found]
        low = read_low(self.path, bases[0] if bases else 0, self._note)
        with self._state:
            known = {(s.base, s.inode): s for s in self._segments}
            segments = [known.get((b, ino)) or Segment(
                b, self.path, inode=ino, _path=None if n == segment_name(b) else self.path / n)
                for b, (n, ino) in zip(bases, found, strict=True)]
            same, size = segments[-1].check_file() if segments else (True, None)
            if not same:
                # a new file under the old name and inode number (a recreated log), or the
                # old one shorter than indexed (restored from a copy): the files are the
                # truth, the index is rebuilt from them, and the `acked` rule tells a log
                # that lost acknowledged entries
                segments[-1] = Segment(segments[-1].base, self.path,
                                       inode=segments[-1].inode)
                size = None
            if not segments:
                first = self.path / segment_name(low)
                create_empty(first, self.access)
                fsync_dir(self.path)
                segments = [Segment(low, self.path, inode=first.stat().st_ino)]
                size = None
                if self._acked is None:  # a new log: its mark exists before any frame
                    self._write_mark(low)
            self._segments = segments
            self._low = max(low, segments[0].base)
            for seg, nxt in itertools.pairwise(segments):
                if seg.base + seg.count != nxt.base:
                    seg.scanned = False  # sealed by another process: rescan when read
                if seg.recent:  # sealed: no scan finds anything new in it any more
                    seg.forget_recent()
            self._load_claims(segments)
            self._scan(segments[-1], exclusive=exclusive, tail=True, size=size)

    def _scan(self, seg: Segment, exclusive: bool, tail: bool,
              end_offset: int | None = None, size: int | None = None) -> None:
        scan_segment(seg, acked=self._acked, floor=self._acked_floor, exclusive=exclusive,
                     tail=tail, end_offset=end_offset, namespace=self.namespace,
                     name=self.name, size=size)
        if seg.claims:
            for wrong in seg.settle_freed():
                self._note(f"freed-frames record of offsets [{wrong.start}, {wrong.end}) does "
                           f"not match segment {seg.path.name} (bytes [{wrong.pos}, "
                           f"{wrong.end_pos})): ignored, its frames are read as they lie")

    def _load_claims(self, segments: list[Segment]) -> None:
        """Hand each segment the ``freed`` records of it (re-read only when the file
        changed: it grows by appends and is replaced whole)."""
        try:
            st = os.stat(os.path.join(self.path, FREED_FILE))
            key: tuple[int, int] | None = (st.st_ino, st.st_size)
        except FileNotFoundError:
            key = None
        if key != self._freed_key:
            self._freed_key = key
            self._freed, self._freed_whole = (read_freed(self.path, self._note, self._torn)
                                              if key else ([], 0))
        by_base: dict[int, dict[int, FreedFrames]] = {}
        for record in self._freed:
            by_base.setdefault(record.base, {})[record.start] = record
        for seg in segments:
            claims = by_base.get(seg.base, {})
            if claims != seg.claims:
                seg.claims = claims
                if seg.scanned:
                    seg.settle_freed()

    def _write_mark(self, next_offset: int) -> None:
        """Acknowledge every offset below ``next_offset`` (the ``acked`` file, fsync'd)."""
        self._ack_seq += 1
        write_acked(self.path, self._ack_seq, next_offset, self.access)
        self._acked = next_offset

    # -- reading --------------------------------------------------------------

    def _bounds(self) -> tuple[int, int, list[Segment]]:
        with self._locked(fcntl.LOCK_SH):
            self._refresh(exclusive=False)
        with self._state:
            last = self._segments[-1]
            return self._low, last.base + last.count, list(self._segments)

    def low_watermark(self) -> int:
        return self._bounds()[0]

    def high_watermark(self) -> int:
        return self._bounds()[1]

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        low, high, segments = self._bounds()
        self.check_range(start, low, high)
        stop = high if end is None else min(end, high)
        return self._iter(start, stop, segments)

    def _iter(self, start: int, stop: int, segments: list[Segment]) -> Iterator[Entry]:
        offset = start
        for i, seg in enumerate(segments):
            if offset >= stop:
                return
            seg_end = segments[i + 1].base if i + 1 < len(segments) else stop
            if offset >= seg_end:
                continue
            self._ensure_scanned(seg, segments[i + 1].base if i + 1 < len(segments) else None)
            if offset >= seg.base + seg.count:
                raise CorruptEntryError(
                    f"segment {seg.path.name} holds offsets [{seg.base}, "
                    f"{seg.base + seg.count}), offset {offset} is missing",
                    namespace=self.namespace, log=self.name, offset=offset)
            upto = min(stop, seg_end, seg.base + seg.count)
            yield from self._read_segment(seg, offset, upto)
            offset = upto

    def _read_segment(self, seg: Segment, start: int, stop: int) -> Iterator[Entry]:
        """The entries of offsets ``[start, stop)`` of ``seg``: those a scan of the tail
        found new and kept (a catch-up's, just checked) from memory, once, the rest from
        the file."""
        recent = seg.recent
        while start < stop and recent and not seg.freed:
            body = recent.pop(start, None)
            if body is None:
                break
            entry = parse_body(body, None)  # its CRC and offset were checked by the scan
            if entry is None:  # a header field runs past the body: as the file read says
                raise self._bad_frame(seg, seg.position(start), start)
            start += 1
            yield entry
        if start < stop:
            yield from self._read_file(seg, start, stop)

    def _bad_frame(self, seg: Segment, pos: int, offset: int) -> CorruptEntryError:
        """A frame of an indexed offset that fails its CRC or whose fields run past it."""
        return CorruptEntryError(f"CRC or length mismatch at byte {pos} of segment "
                                 f"{seg.path.name}", namespace=self.namespace, log=self.name,
                                 offset=offset)

    def _read_file(self, seg: Segment, start: int, stop: int) -> Iterator[Entry]:
        try:
            f = open(seg.path, "rb", buffering=READ_CHUNK_BYTES)
        except FileNotFoundError:
            raise OffsetOutOfRange(
                f"offset {start} was deleted while reading (segment {seg.path.name})",
                namespace=self.namespace, log=self.name,
            ) from None
        with f:
            pos = seg.positions[start - seg.base]
            f.seek(pos)
            offset = start
            while offset < stop:
                freed_end = seg.freed_until(offset) if seg.freed else None
                if freed_end is not None:  # skipped: log/base.py says why
                    offset = min(freed_end, stop)
                    pos = seg.position(offset)
                    f.seek(pos)
                    continue
                if offset in seg.damaged:
                    raise CorruptEntryError(seg.damaged[offset], namespace=self.namespace,
                                            log=self.name, offset=offset)
                # The index knows where this frame ends: a damaged length field must fail
                # the check below, not make f.read allocate up to 4 GiB (MemoryError) first.
                nxt = offset - seg.base + 1
                limit = seg.positions[nxt] if nxt < len(seg.positions) else seg.end
                head = f.read(FRAME_HEAD.size)
                length, crc = FRAME_HEAD.unpack(head) if len(head) == FRAME_HEAD.size else (-1, 0)
                fits = 0 <= length <= limit - pos - FRAME_HEAD.size
                entry = read_body(f, length, crc) if fits else None
                if entry is None:
                    raise self._bad_frame(seg, pos, offset)
                if entry.offset != offset:
                    raise CorruptEntryError(
                        f"frame at byte {pos} of segment {seg.path.name} holds offset "
                        f"{entry.offset}", namespace=self.namespace, log=self.name, offset=offset,
                    )
                pos += frame_size(length)
                offset += 1
                yield entry

    def _ensure_scanned(self, seg: Segment, nxt: int | None) -> None:
        """Index a sealed segment the first time it is reached, up to the next one's base."""
        if not seg.scanned:
            with self._state:
                self._scan(seg, exclusive=False, tail=False, end_offset=nxt)
