"""Each commits-log record written twice in one append, and read back once.

Replay numbers steps by their order in the commits log, so one record it cannot read
stops it: a skipped record would renumber every step after it. On a store where one
damaged entry is the fault to expect (``LogStore.record_copies`` 2: the file log, where
a flipped byte fails one frame's CRC), the WAL appends each record as two adjacent
entries of one append, the original (key :data:`ORIGINAL`) and its copy (key
:data:`COPY`): one write and one sync, so a copy costs bytes, not syncs. Elsewhere a
record is one entry with an empty key, as every record was before copies existed.

Reading (:class:`CommitsReader`, the one place every reader of the commits log goes
through: replay on open and on refresh, a chunk of the step index read back, ``check``):

* a copy whose entry before it was read is skipped, undecoded;
* a damaged entry followed by its copy: the copy is read in its place, at the
  original's offset (the offset replay numbered it by, and refused it by);
* a damaged entry preceded by an original that was read: a lost copy;
* a damaged entry with neither (both copies damaged, or a record written without a
  copy): the record is lost, a :class:`CorruptEntryError` naming its offset. Reading
  stops there rather than guess: no later record is applied, no step renumbered.

A record's offset is its original's. A read never starts at a copy whose original it
needs: replay goes on after the last entry it consumed (a copy included), a chunk
starts at its first record's original, and the cleaner trims at those positions; a
copy that opens a read belongs to a record before it and is skipped.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from pyspark_durable.errors import CorruptEntryError, OffsetOutOfRange
from pyspark_durable.log.base import Damaged, Entry, Log, Record, read_around_damage

log = logging.getLogger(__name__)

ORIGINAL = b"r"  # a record that has a copy right after it
COPY = b"c"  # the copy of the record right before it
# (an empty key: a record written alone, by a store that keeps one copy or by a release
# before copies existed)

_warned: set[tuple[str, int]] = set()  # (namespace, offset): saved damage logged once
_warned_lock = threading.Lock()


def commit_entries(values: Sequence[bytes], copies: int) -> list[Record]:
    """The entries one append writes for ``values``: each once, or original and copy."""
    if copies <= 1:
        return [Record(b"", value) for value in values]
    return [Record(key, value) for value in values for key in (ORIGINAL, COPY)]


@dataclass(frozen=True, slots=True)
class Saved:
    """A damaged entry whose record was read from its other copy: nothing is lost."""

    damaged: int
    read: int  # the offset of the copy read instead (the original's, for a lost copy)
    reason: str

    def text(self) -> str:
        if self.read > self.damaged:
            return (f"commits offset {self.damaged} is damaged ({self.reason}); its copy at "
                    f"{self.read} was read, nothing lost")
        return (f"commits offset {self.damaged}, the copy of the record at {self.read}, is "
                f"damaged ({self.reason}); the record was read, nothing lost")


@dataclass(frozen=True, slots=True)
class Lost:
    """A record no copy of which could be read."""

    error: CorruptEntryError


class CommitsReader:
    """The records of commits offsets ``[start, end)``, each once, as ``(offset, entry)``:
    the offset is the record's (its original's), the entry the copy that was read.

    ``position`` is the offset after the last entry consumed (a skipped copy included):
    where a later read goes on. ``saved`` lists the damage a copy made up for. A range
    error (``OffsetOutOfRange``) raises from the constructor.
    """

    def __init__(self, commits: Log, start: int, end: int | None = None,
                 read: Callable[..., Iterator[Entry]] | None = None) -> None:
        self._log, self._start, self._end = commits, start, end
        self._read = read or commits.read  # (a loader reads through the method it was given)
        self.position = start
        self.saved: list[Saved] = []
        self._raw = read_around_damage(self._read, start, end)
        self._back: list[Entry | Damaged] = []  # an entry looked at ahead, not consumed

    def __iter__(self) -> Iterator[tuple[int, Entry]]:
        for item in self.items():
            if isinstance(item, Lost):
                raise item.error
            if isinstance(item, Saved):
                self._warn(item)
                continue
            yield item

    def _warn(self, saved: Saved) -> None:
        key = (self._log.namespace, saved.damaged)
        with _warned_lock:
            if key in _warned:
                return
            _warned.add(key)
        log.warning("namespace=%s: %s", self._log.namespace, saved.text())

    def items(self) -> Iterator[tuple[int, Entry] | Saved | Lost]:
        """Records, and a :class:`Saved` or :class:`Lost` for each damage met (``check``
        goes on after a lost record; a reader raises its error)."""
        prev: Entry | Damaged | None = None  # None: the read's first entry is next
        while True:
            item = self._next()
            if item is None:
                return
            if isinstance(item, Entry):
                self.position = item.offset + 1
                if item.key != COPY:
                    yield item.offset, item
                # a copy whose original was read (or lies before the read) is skipped
                prev = item
                continue
            at = item.offset
            self.position = at + 1
            before = prev if prev is not None else self._look_back(at)
            if isinstance(before, Entry) and before.key == ORIGINAL and before.offset == at - 1:
                saved = Saved(at, at - 1, item.error.reason)
                self.saved.append(saved)
                yield saved
                prev = item
                continue
            after = self._next(past_end=at + 1)
            if isinstance(after, Entry) and after.key == COPY and after.offset == at + 1:
                self.position = at + 2
                saved = Saved(at, at + 1, item.error.reason)
                self.saved.append(saved)
                yield saved
                yield at, after
                prev = after
                continue
            if isinstance(after, Damaged) and after.offset == at + 1:
                self.position = at + 2
                why = "the entry after it, its copy if it has one, is damaged too"
                if after.error.reason != item.error.reason:
                    why += f" ({after.error.reason})"
            else:
                if after is not None:
                    self._back.append(after)
                why = ("it was written without a copy" if after is not None else
                       "no entry follows it")
            yield Lost(CorruptEntryError(
                f"commits offset {at} is damaged ({item.error.reason}) and no copy of its "
                f"record could be read ({why}): that record is lost. Reading stops there: "
                "no record after it was applied and no step was renumbered; "
                "`durablewal check` lists the damage", namespace=self._log.namespace,
                log=self._log.name, offset=at))
            prev = item

    def _next(self, past_end: int | None = None) -> Entry | Damaged | None:
        """The next raw entry; with ``past_end``, the entry there even past the read's end
        (the copy of the range's last record lies one past it)."""
        if self._back:
            return self._back.pop()
        found = next(self._raw, None)
        if found is not None or past_end is None or self._end is None or past_end != self._end:
            return found
        try:
            return next(read_around_damage(self._read, past_end, past_end + 1), None)
        except OffsetOutOfRange:
            return None

    def _look_back(self, at: int) -> Entry | Damaged | None:
        """The entry before the read's start, to tell a lost copy from a lost record."""
        if at != self._start or at == 0:
            return None
        try:
            return next(read_around_damage(self._read, at - 1, at), None)
        except OffsetOutOfRange:
            return None
