"""One file log: a folder of segments, appended with group commit, read by many processes.

Implementation notes (why):

* **Group commit.** Appends from every thread of a process go to one writer thread,
  which writes all pending frames with one ``write`` and one ``fdatasync``; an
  append returns only after its fsync. While appends are concurrent (a write
  gathered several, or more arrived during one) the writer waits up to
  ``group_commit_interval_ms`` after the previous fsync (IOx waits 10 ms) so they
  share fsyncs; a lone appender, whose next append comes only after the previous
  returned, never waits. A synchronous append that finds nothing pending or being
  written, after a write that was not concurrent, is written by its caller's thread:
  there is no group to join.
* **Several processes, sharing syncs.** Spark runs writers in separate Python
  workers. A writer holds ``flock(LOCK_EX)`` on ``lock`` while it catches up with
  frames other processes appended, writes and fsyncs. One that had to wait for the
  lock writes, lets go, and syncs at its next hold every append that waits past the
  mark, its own and those written meanwhile: one sync for all (``_write_batch``; the
  rule is docs/backends.md's "Shared syncs", the writers' state :class:`.SyncState`).
  Readers take ``LOCK_SH`` only to learn the end, and never read past the mark.
* **Acknowledgement, and the fsync rule.** After the frames' fsync the ``acked`` file
  records the new end (:mod:`.marks`), and only then do the appends return. Nothing
  past that end is ever read (:mod:`.segments`). After a failed write or fsync no byte
  of that write is acknowledged unless it is written again and synced: a failed frame
  write is cut off under the lock (and, should the cut fail too, by the next writer,
  as a torn write); a failed sync cuts everything past the mark in a new epoch, which
  tells the other writers to write theirs again; and a failed write of the mark is
  written again once, into the other slot; if that fails as well the append is
  :class:`AppendIndeterminate`.
* **Deletion.** ``delete_before`` records the low watermark in a file (replaced with
  rename(2), then the folder is fsync'd) and removes whole segments below it. A
  deletion point inside the segment being appended to rolls it (once it holds 1/16
  of a segment), so the next deletion can free it: disk follows what is kept, not
  the segment size.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import threading
import time
from array import array
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark_durable.errors import AppendIndeterminate, BackendUnavailable
from pyspark_durable.log.base import Record, merge_ranges
from pyspark_durable.log.file.copy import COPY_LOCK
from pyspark_durable.log.file.disk import (
    PRIVATE,
    Access,
    create_empty,
    create_file,
    fsync_dir,
    storage_errors,
    write_all,
)
from pyspark_durable.log.file.folder import SegmentFolder
from pyspark_durable.log.file.frames import FRAME_HEAD, frame_parts
from pyspark_durable.log.file.freed import (
    FreedFrames,
    append_freed,
    hole_state,
    punch,
    rewrite_freed,
)
from pyspark_durable.log.file.marks import (
    CUT,
    UNSURE,
    SyncState,
    read_sync,
    write_low,
    write_sync,
)
from pyspark_durable.log.file.segments import (
    Segment,
    segment_name,
    truncate_durably,
    walk_frames,
)

log = logging.getLogger(__package__)

# a deletion that reaches into the segment being appended to rolls it once it holds
# this fraction of a segment, so disk stays within a fraction of a segment of what the
# cleaner keeps (plus what is written between two deletions)
ROLL_ON_DELETE = 16
# an append whose frames another process's failed or unfinished sync cut is written
# again this often before it fails
REWRITES = 3


@dataclass
class Tail:
    """The end of a log as a writer holding its lock sees it: the last segment, the
    acknowledged end (``acked``), and the frames past it that wait for a sync (their
    byte ``positions``, the byte after them, the offset after them). A writer's own
    tail also keeps its last frame's head, to find it again."""

    seg: Segment
    acked: int
    positions: list[int]
    end: int
    next_offset: int
    last_head: bytes = b""

    @classmethod
    def acknowledged(cls, seg: Segment) -> Tail:
        """Nothing waits: the tail is the segment's acknowledged end."""
        acked = seg.base + seg.count
        return cls(seg, acked, [], seg.end, acked)


class FileLog(SegmentFolder):
    """One log in a folder of segment files; see the module docstring (what any handle
    reads is :class:`~pyspark_durable.log.file.folder.SegmentFolder`'s)."""

    def __init__(
        self,
        namespace: str,
        name: str,
        path: Path,
        segment_size_bytes: int,
        group_commit_interval_ms: float,
        access: Access = PRIVATE,
    ) -> None:
        super().__init__(namespace, name, path, access)
        self.segment_size_bytes = segment_size_bytes
        self.group_commit_interval_ms = group_commit_interval_ms
        self._pending: list[tuple[Sequence[Record], Future]] = []
        self._cond = threading.Condition()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._last_sync = 0.0
        self._concurrent = False  # were appends concurrent at the last write?
        self._writing = False  # a batch is being written (by the writer or a lone caller)
        self._punched: set[FreedFrames] = set()  # records this handle knows have their hole
        # syncs this handle made, and its writes another process's sync acknowledged
        self.sync_stats = {"synced": 0, "joined": 0}

    # -- appending ------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> list[int]:
        """Append and wait. A lone caller (nothing pending or being written, and the last
        write was not shared) writes on its own thread: handing its records to the
        writer thread and waking again would cost two thread switches, with no one to
        share a sync with."""
        if not records:
            return []
        with self._cond:
            if self._closed:
                raise BackendUnavailable("log is closed", namespace=self.namespace, log=self.name)
            lone = not (self._pending or self._writing or self._concurrent)
            if lone:
                self._writing = True
        if not lone:
            return self.append_async(records).result()
        try:
            with storage_errors("appending", self.path, namespace=self.namespace,
                                log=self.name):
                return self._write_batch([records])[0]
        finally:
            with self._cond:
                self._writing = False
                self._concurrent = bool(self._pending)
                self._cond.notify_all()

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        fut: Future[list[int]] = Future()
        if not records:
            fut.set_result([])
            return fut
        with self._cond:
            if self._closed:
                raise BackendUnavailable("log is closed", namespace=self.namespace, log=self.name)
            self._pending.append((records, fut))
            if self._writer is None:
                self._writer = threading.Thread(
                    target=self._write_loop, name=f"durablewal-{self.name}", daemon=True
                )
                self._writer.start()
            self._cond.notify()
        return fut

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                # a lone caller's write on its own thread goes first (closing does not
                # wait for it: the log's flock keeps the two writes apart)
                while not self._closed and (not self._pending or self._writing):
                    self._cond.wait()
                if not self._pending:
                    return
            wait_s = self._last_sync + self.group_commit_interval_ms / 1000 - time.monotonic()
            if wait_s > 0 and self._concurrent:
                time.sleep(wait_s)
            with self._cond:
                batch, self._pending = self._pending, []
                self._writing = True
            try:
                with storage_errors("appending", self.path, namespace=self.namespace,
                                    log=self.name):
                    offsets = self._write_batch([r for r, _ in batch])
            except BaseException as exc:  # noqa: BLE001 - forwarded to every waiter, none hangs
                with self._cond:
                    self._writing = False
                for _, fut in batch:
                    fut.set_exception(exc)
                continue
            with self._cond:  # appends that came while this batch was written wait next time
                self._writing = False
                self._concurrent = len(batch) > 1 or bool(self._pending)
            for (_, fut), offs in zip(batch, offsets, strict=False):
                fut.set_result(offs)
            # the written records are freed now, not when the next append wakes this
            # thread: a writer's memory is what it has in flight, not that plus the last batch
            del batch, offsets

    def _write_batch(self, groups: list[Sequence[Record]]) -> list[list[int]]:
        """Write the groups' frames and return once a sync acknowledged them. Alone (the
        lock was free), the writer syncs at once. When another process waited for the
        lock, it lets go after writing and takes the lock again to sync: by then the
        others have written theirs, and one sync acknowledges them all."""
        for attempt in itertools.count():
            result, mine, epoch = self._write_pending(groups)
            if epoch is None:
                return result  # synced while it held the lock
            fate = self._await_sync(result, mine, epoch)
            if fate == "acked":
                return result
            if fate == "unsure":
                raise self._in_doubt(result[0][0], mine.next_offset,
                                     "were synced by another process whose write of the mark "
                                     "acknowledging them failed twice")
            if attempt >= REWRITES:
                raise BackendUnavailable(
                    f"the records were written {attempt + 1} times and cut each time by "
                    "another process's failed or unfinished sync, never acknowledged: "
                    f"retry once the disk of {self.path} is healthy",
                    namespace=self.namespace, log=self.name)
            log.warning("namespace=%s log=%s: another process's sync failed or did not "
                        "finish, and cut the records this append wrote (never acknowledged): "
                        "writing them again", self.namespace, self.name)
        raise AssertionError("unreachable")

    def _write_pending(self, groups: list[Sequence[Record]],
                       ) -> tuple[list[list[int]], Tail, int | None]:
        """Write the groups' frames under the lock, and sync them there if no other
        process waited for it (epoch None); else leave them waiting past the mark and
        return the epoch they were written at."""
        with self._locked(fcntl.LOCK_EX) as lock:
            tail, state = self._settle(lock.fd)
            if tail.end >= self.segment_size_bytes and tail.next_offset > tail.seg.base:
                if tail.positions:  # a roll seals only acknowledged frames
                    self._sync(lock.fd, tail, state)
                tail = Tail.acknowledged(self._roll(tail.next_offset))
            fd = os.open(tail.seg.path, os.O_WRONLY)  # written, and synced, through one open
            try:
                if self._acked is None:
                    # no readable mark (a log from before it, or both slots damaged): what
                    # the older rule indexed becomes acknowledged now, synced first (its
                    # last frames may be a waiting writer's), before any frame past it
                    os.fdatasync(fd)
                    self._write_mark(tail.next_offset)
                result, mine = self._write_frames(tail, groups, fd)
                state.written = mine.next_offset
                if not lock.contended:
                    self._sync(lock.fd, mine, state, fd, alone=not tail.positions)
                    return result, mine, None
            finally:
                os.close(fd)
            write_sync(lock.fd, state)
            return result, mine, state.epoch

    def _await_sync(self, result: list[list[int]], mine: Tail, epoch: int) -> str:
        """Take the lock again after writing ``mine`` at ``epoch``: "acked" (by another
        process's sync, or by this writer's, of everything waiting), "cut" or "unsure"."""
        with self._locked(fcntl.LOCK_EX) as lock:
            try:
                tail, state = self._settle(lock.fd)
                fate = self._fate(tail, state, epoch, mine)
            except Exception as exc:
                # the frames wait past the mark, whole: another process's sync may
                # still acknowledge them, so this failure cannot say they never will
                raise self._in_doubt(result[0][0], mine.next_offset,
                                     "were written and wait for a sync, and looking for it "
                                     f"failed ({exc})") from exc
            if fate == "pending":
                self._sync(lock.fd, tail, state)
                return "acked"
            if fate == "acked":
                self.sync_stats["joined"] += 1
            return fate

    def _settle(self, fd: int) -> tuple[Tail, SyncState]:
        """Catch up (the caller holds the exclusive lock, whose file ``fd`` holds the
        writers' :class:`SyncState`) and judge what lies past the mark: whole frames
        below ``written`` wait for a sync and stay; bytes past them are a torn write,
        cut. A sync left unfinished (its process died: it may have failed) or a frame
        below ``written`` that is not whole cuts everything past the mark, in a new
        epoch that tells their writers."""
        self._refresh(exclusive=True)
        with self._state:
            seg = self._segments[-1]
            acked = seg.base + seg.count
        state = read_sync(fd, acked)
        written = max(state.written, acked)
        size = seg.size  # scanned just now, under the lock
        positions, pos, nxt = array("q"), seg.end, acked
        if written > acked and not state.syncing:
            with open(seg.path, "rb") as f:
                positions, pos, nxt, _ = walk_frames(f, seg.end, size, acked, written)
        if state.syncing or nxt != written:
            why = ("a sync did not finish (its process died)" if state.syncing else
                   f"the frames below offset {written} are not whole")
            log.warning("namespace=%s log=%s: %s: cutting %s past the acknowledged end "
                        "(offset %d, byte %d); no acknowledged entry is lost", self.namespace,
                        self.name, why, seg.path.name, acked, seg.end)
            if size > seg.end:
                truncate_durably(seg.path, seg.end)
            state.cut(acked)
            write_sync(fd, state, durable=True)
            return Tail.acknowledged(seg), state
        if pos < size:
            log.warning("namespace=%s log=%s: truncating torn tail of %s at byte %d (%d "
                        "bytes past the last whole append, offset %d: a write whose process "
                        "died); no acknowledged entry is lost", self.namespace, self.name,
                        seg.path.name, pos, size - pos, written)
            truncate_durably(seg.path, pos)
        state.written = written
        return Tail(seg, acked, list(positions), pos, written), state

    def _fate(self, tail: Tail, state: SyncState, epoch: int, mine: Tail) -> str:
        """What became of frames written at ``epoch`` (``mine``), now that the lock is
        held again: "acked", "pending" (still waiting: this writer syncs), "cut" or
        "unsure" (by the first cut after ``epoch``, :class:`SyncState`)."""
        if state.epoch == epoch:
            if tail.acked < mine.next_offset:
                return "pending"
            return "acked" if self._still_mine(mine) else "cut"
        at, kind = next(((a, k) for e, a, k in state.cuts if e == epoch + 1), (None, None))
        if at is None:
            return "unsure"  # more cuts since than remembered, or a damaged state
        if at >= mine.next_offset:
            return "acked" if self._still_mine(mine) else "cut"
        return "cut" if kind == CUT else "unsure"

    def _still_mine(self, mine: Tail) -> bool:
        """Is the last frame this writer wrote still where it wrote it (a writer that does
        not share syncs, an older release, cuts past the mark without an epoch)?"""
        try:
            fd = os.open(mine.seg.path, os.O_RDONLY)
        except FileNotFoundError:
            return True  # deleted: only acknowledged segments are
        try:
            return os.pread(fd, len(mine.last_head), mine.positions[-1]) == mine.last_head
        finally:
            os.close(fd)

    def _write_frames(self, tail: Tail, groups: list[Sequence[Record]], fd: int,
                      ) -> tuple[list[list[int]], Tail]:
        """Write the groups' frames after the tail, through ``fd`` (not synced). On
        failure they are cut off again, so no later writer takes them for a whole append."""
        now = int(time.time() * 1000)
        buffers: list = []
        result, positions, end, next_offset = [], list(tail.positions), tail.end, \
            tail.next_offset
        for records in groups:
            offs = []
            for record in records:
                head, value = frame_parts(next_offset, now, record)
                positions.append(end)
                buffers += (head, value)
                end += len(head) + len(value)
                offs.append(next_offset)
                next_offset += 1
            result.append(offs)
        try:
            os.lseek(fd, tail.end, os.SEEK_SET)
            write_all(fd, buffers)
        except OSError as exc:
            self._cut_back(tail.seg, tail.end)
            raise exc
        mine = Tail(tail.seg, tail.acked, positions, end, next_offset,
                    bytes(buffers[-2][: FRAME_HEAD.size]))
        return result, mine

    def _sync(self, fd: int, tail: Tail, state: SyncState, seg_fd: int | None = None,
              alone: bool = False) -> None:
        """Sync every frame past the mark (this writer's and those waiting; through
        ``seg_fd`` if the segment is open), then move the mark over them. A failed sync
        cuts them all, in a new epoch; a mark that cannot be written is a new epoch too,
        of doubt (:class:`SyncState`).

        ``alone``: only this writer's frames lie past the mark, and it held the lock since
        it found none there. Then the state is not written unless something is cut: its
        ``written`` stays at or below the mark, so if this writer dies before the mark,
        the next writer takes its frames for a torn write and cuts them, as ``syncing``
        would make it do, and no other writer waits to be told."""
        state.syncing = True
        if not alone:
            write_sync(fd, state)
        try:
            if seg_fd is not None:
                os.fdatasync(seg_fd)
            else:
                self._fdatasync(tail.seg)
        except OSError:
            if self._cut_back(tail.seg, tail.seg.end):
                state.cut(tail.acked)
                write_sync(fd, state, durable=True)
            raise  # uncut: ``syncing`` stays set, and the next writer cuts
        try:
            self._write_mark(tail.next_offset)
        except OSError as first:
            # the mark's page may be gone while the cache shows it: write it again,
            # into the other slot, and only a synced copy acknowledges the frames
            log.warning("namespace=%s log=%s: writing the acknowledgement mark failed "
                        "(%s); writing it again", self.namespace, self.name, first)
            try:
                self._write_mark(tail.next_offset)
            except OSError as second:
                state.cut(tail.acked, UNSURE)
                write_sync(fd, state)
                raise self._in_doubt(tail.acked, tail.next_offset,
                                     "were synced but the mark acknowledging them failed "
                                     f"twice ({first.strerror}; {second.strerror})") from second
        state.syncing = False
        if not alone:
            write_sync(fd, state)
        self._last_sync = time.monotonic()
        self.sync_stats["synced"] += 1
        seg = tail.seg
        with self._state:
            seg.positions.extend(tail.positions)
            seg.end = tail.end
        if len(seg.head) < FRAME_HEAD.size and tail.positions:
            with open(seg.path, "rb") as f:
                seg.head = f.read(FRAME_HEAD.size)

    def _in_doubt(self, start: int, end: int, what: str) -> AppendIndeterminate:
        """The error of records ``[start, end)`` that may or may not be acknowledged."""
        return AppendIndeterminate(
            f"the records at offsets [{start}, {end}) {what}, at {self.path}: they may or "
            "may not be acknowledged, now and after a crash. Retry the operation once the "
            "disk is healthy (a WAL commit is idempotent per writer step)",
            namespace=self.namespace, log=self.name)

    def _fdatasync(self, seg: Segment) -> None:
        fd = os.open(seg.path, os.O_WRONLY)
        try:
            os.fdatasync(fd)
        finally:
            os.close(fd)

    def _cut_back(self, seg: Segment, at: int) -> bool:
        """Cut ``seg`` to ``at`` bytes, durably; False (and logged) if that failed too:
        the bytes lie past the mark, and the next writer cuts them."""
        try:
            truncate_durably(seg.path, at)
            return True
        except OSError as cut:
            log.warning("namespace=%s log=%s: cutting a failed append off %s failed too "
                        "(%s); the next writer cuts it (it lies past the acknowledged "
                        "end)", self.namespace, self.name, seg.path.name, cut)
            return False

    def _roll(self, base: int) -> Segment:
        path = self.path / segment_name(base)
        create_empty(path, self.access)
        fsync_dir(self.path)
        seg = Segment(base, self.path, scanned=True, inode=path.stat().st_ino)
        with self._state:
            self._segments.append(seg)
        return seg

    # -- freeing single entries ---------------------------------------------------

    can_free = True

    def free(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Record the frames of ``ranges`` in ``freed`` (fsync'd), then punch their
        blocks (:mod:`.freed` says why in this order). Damaged offsets are left as they
        are: they stay reported, not hidden.

        While a copy of the log is being taken (:mod:`.copy`: it holds the log's copy
        lock shared) nothing is punched: a punch is the one change to bytes below the
        log's end, and the copy reads them after its capture. The frames are recorded
        all the same (they read as freed from now on), and the first free that finds no
        copy running punches them, as after a crash between the record and the punch.
        The lock is never waited for, so a copy holds no cleaner back."""
        with storage_errors("freeing", self.path, namespace=self.namespace, log=self.name):
            with self._locked(fcntl.LOCK_EX), self._punch_lock() as may_punch:
                self._refresh(exclusive=True)
                # one block size for the holes punched and the holes looked for: the
                # segments' file system is the folder's
                block = os.stat(self.path).st_blksize
                if may_punch:
                    self._finish_punches(block)
                records = self._freeable(merge_ranges(ranges))
                if not records:
                    return
                append_freed(self.path, records, self._freed_whole, self.access)
                self._freed_key = None  # re-read: the records are ours now
                with self._state:
                    self._load_claims(self._segments)
                if not may_punch:
                    log.info("namespace=%s log=%s: a copy of the log is being taken; the "
                             "freed frames are recorded and their blocks are punched by a "
                             "later free", self.namespace, self.name)
                    return
                for record in records:
                    if not self._punch(record, block):
                        break

    @contextmanager
    def _punch_lock(self) -> Iterator[bool]:
        """The copy lock taken exclusively without waiting: True while held (no copy is
        being taken, and none starts until it is released), False if a copy holds it."""
        fd = create_file(self.path / COPY_LOCK, self.access, os.O_RDWR)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)  # closing the description releases the lock

    def _punch(self, record: FreedFrames, block: int) -> bool:
        """Punch the hole of ``record``; False (and noted) if the file system cannot."""
        seg = next(s for s in self._segments if s.base == record.base)
        if not punch(seg.path, record.pos, record.end_pos, block):
            self._note("this file system cannot punch holes: freed frames are "
                       "no longer read but keep their space until deleted")
            return False
        self._punched.add(record)
        return True

    def _finish_punches(self, block: int) -> None:
        """Punch the holes a crash left unpunched after their records were written. Only
        the last records can lack them (:mod:`.freed` says why): walk back from the last,
        stop at the first hole found; punch only a record that matches its segment's
        frames as indexed, so a punch never reaches a frame the record does not free."""
        with self._state:
            segments = {seg.base: seg for seg in self._segments}
        nxt = dict(itertools.pairwise(sorted(segments)))
        for record in reversed(self._freed):
            seg = segments.get(record.base)
            if record in self._punched or seg is None:
                return  # seen by this handle, or older than the first segment
            state = hole_state(seg.path, record.pos, record.end_pos, block)
            if state == "hole":
                self._punched.add(record)
                return  # the frees before this one finished
            if state is None:
                self._punched.add(record)
                continue  # too small for a whole block: says nothing of the others
            self._ensure_scanned(seg, nxt.get(seg.base))
            if record in seg.applied and not self._punch(record, block):
                return

    def _freeable(self, ranges: list[tuple[int, int]]) -> list[FreedFrames]:
        """The records for ``ranges`` (inside ``[low, high)``), split per segment and
        around offsets already freed or damaged. The caller holds the exclusive lock."""
        with self._state:
            segments, low = list(self._segments), self._low
        out: list[FreedFrames] = []
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base if i + 1 < len(segments) else None
            if nxt is not None and not any(a < nxt and b > seg.base for a, b in ranges):
                continue  # no range reaches it: it is not scanned
            self._ensure_scanned(seg, nxt)
            top = seg.base + seg.count
            for start, end in ranges:
                offset, stop = max(start, low, seg.base), min(end, top)
                while offset < stop:
                    skip = seg.freed_until(offset)
                    if skip is not None or offset in seg.damaged:
                        offset = skip or offset + 1
                        continue
                    run = offset
                    while run < stop and run not in seg.damaged and \
                            seg.freed_until(run) is None:
                        run += 1
                    out.append(FreedFrames(seg.base, offset, run, seg.position(offset),
                                           seg.position(run)))
                    offset = run
        return out

    def freed_ranges(self) -> list[tuple[int, int]]:
        """A scanned segment's checked ranges; an unscanned one's records as they say
        (a scan to check them would read whole old segments at every cleaner pass)."""
        low, high, segments = self._bounds()
        found = []
        for seg in segments:
            found += seg.freed if seg.scanned else [(c.start, c.end) for c in
                                                    seg.claims.values()]
        return [r for r in merge_ranges((max(a, low), min(b, high)) for a, b in found)
                if r[0] < r[1]]

    # -- deleting and closing ---------------------------------------------------

    def delete_before(self, offset: int) -> None:
        with storage_errors("deleting", self.path, namespace=self.namespace, log=self.name):
            self._delete_before(offset)

    def _delete_before(self, offset: int) -> None:
        with self._locked(fcntl.LOCK_EX) as lock:
            tail, _ = self._settle(lock.fd)
            with self._state:
                last = self._segments[-1]
                target = min(offset, last.base + last.count)
                if target <= self._low:
                    return
            if target > last.base and last.end >= self.segment_size_bytes // ROLL_ON_DELETE \
                    and not tail.positions:  # a roll seals only acknowledged frames
                # the point is inside the segment being appended to, which only a roll lets
                # a deletion free (now, if the point is its end; else the next time):
                # without one, a log that never fills a segment keeps every entry on disk
                self._roll(last.base + last.count)
            with self._state:
                doomed = [s for s, nxt in itertools.pairwise(self._segments) if nxt.base <= target]
            write_low(self.path, target, self.access)
            for seg in doomed:
                seg.path.unlink(missing_ok=True)
            if doomed:
                fsync_dir(self.path)
                gone_bases = {s.base for s in doomed}
                if any(r.base in gone_bases for r in self._freed):
                    # records of deleted segments: dropped, so the file follows what is kept
                    rewrite_freed(self.path, [r for r in self._freed
                                              if r.base not in gone_bases], self.access)
                    self._freed_key = None
            gone = {id(s) for s in doomed}
            with self._state:
                self._low = target
                self._segments = [s for s in self._segments if id(s) not in gone]

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._writer is not None:
            self._writer.join()
