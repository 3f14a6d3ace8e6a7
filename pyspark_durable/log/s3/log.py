"""One log in a bucket: immutable objects, ordered by conditional create alone.

Layout of a log (``{base}`` is ``{prefix}{namespace}/logs/{log}/``)::

    {base}meta                     exists once the log was created
    {base}e/{first:020d}           one object per append: the entries at offsets
                                   [first, first + count), count <= MAX_RECORDS
    {base}low                      the low watermark, "{offset} {crc32 as 8 hex}"
    {base}hint                     a recent boundary (see below), same form

**The rule that makes it safe.** An entry object is only ever created with
``If-None-Match: *`` at a *boundary*: 0, or the end (first + count) of an object that
exists. The boundaries therefore form one chain from 0, each key has at most one
object, and two writers racing for one offset send two creates of the same key: the
store lets exactly one succeed, and the other gets 412 and moves past the winner's
object. Offsets stay dense (no object can start inside another: no writer ever learns
an offset inside one as a boundary), and a winner is decided by the store, never by a
clock, a lock or a lease.

**Which writer won.** Each object carries a random token in its metadata. A create
that fails in a way that leaves its outcome open (a lost answer, a timeout; the client
retries it, and a retry of a create that did land answers 412) is settled by one HEAD:
the object at that key is ours (stored: success), another writer's (ours can never
land there now: move on), or cannot be seen (:class:`AppendIndeterminate`).

**A boundary that was deleted.** A cleaner moves ``low`` before it deletes the objects
below it, and a deleted object's key can be created again: a handle that learned a
boundary before a cleaner deleted the object ending there would create its object below
the low watermark, where no reader looks. So every create is followed by a GET of
``low``: an object that landed below it is deleted again and the append made at the end
the LIST finds (a create succeeds at a deleted key only after ``low`` passed it, and S3
reads after writes are strongly consistent, so the GET sees that ``low``).

**Finding the end.** ``hint`` holds a boundary written every ``HINT_EVERY`` offsets
(without a condition: a racing writer may put an older one back, which is still a
boundary, just staler). The end is found by one LIST of the keys from that boundary on
(and a HEAD of the last for its count), so an open costs the same however long the
log's history. The object holding the last boundary is never deleted, so the chain's
end is always found.
"""

from __future__ import annotations

import logging
import time
import uuid
import zlib
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from pyspark_durable.errors import (
    AppendIndeterminate,
    CorruptEntryError,
    DurableWalError,
    OffsetOutOfRange,
)
from pyspark_durable.log.base import Entry, Record
from pyspark_durable.log.file.frames import frame_parts
from pyspark_durable.log.s3.client import (
    ERRORS,
    MISSING,
    PRECONDITION,
    is_code,
    is_transient,
    typed,
)
from pyspark_durable.log.s3.objects import (
    CACHED_OBJECT_BYTES,
    LIST_PAGE,
    MAX_RECORDS,
    READ_AHEAD,
    ObjectLog,
    plain_etag,
)

log = logging.getLogger(__name__)

HINT_EVERY = 256  # offsets between two writes of the hint: a LIST from it reads < 1 page
# an append of at most this much tries the offset it knows first; a larger one lists the
# end first, since a create that loses the race has sent its whole body for nothing
OPTIMISTIC_BYTES = 64 << 10
# an end listed ahead (``expect_append``) serves an append that starts within this long;
# an older one is listed again (a stale end is still safe: its create loses, and retries)
END_AHEAD_S = 2.0
READ_AHEAD_BYTES = 64 << 20  # objects a read fetches at once hold at most this much
CONFLICT = ("ConditionalRequestConflict", "409")  # S3: a racing conditional write, retry it


def _mark(value: int) -> bytes:
    text = str(value).encode()
    return text + b" %08x" % zlib.crc32(text)


def _parse_mark(data: bytes) -> int | None:
    """The offset of a ``low``/``hint`` object, None if it is damaged."""
    text, _, crc = data.strip().partition(b" ")
    if not text.isdigit() or crc != b"%08x" % zlib.crc32(text):
        return None
    return int(text)


class S3Log(ObjectLog):
    """A log of entry objects in a bucket (see the module docstring for the rule); the
    objects one at a time are :class:`~pyspark_durable.log.s3.objects.ObjectLog`'s."""

    can_free = False  # an object is whole or gone: a prefix is deleted, like Kafka

    def _mark_object(self, name: str) -> tuple[int | None, str | None]:
        """(offset, ETag) of the ``low`` or ``hint`` object; (None, None) if absent."""
        got = self._get(self._base + name, f"reading the {name} mark")
        if got is None:
            return None, None
        body, answer = got
        value = _parse_mark(body)
        if value is None:
            raise CorruptEntryError(f"the {name} mark s3://{self._bucket}/{self._base}{name} "
                                    "is damaged (bad offset or CRC)", namespace=self.namespace,
                                    log=self.name)
        etag = answer.get("ETag")
        if name == "low" and etag:
            with self._lock:
                self._low_seen = (plain_etag(etag), value)
        return value, etag

    # -- the end of the chain ----------------------------------------------------------

    def _end_from(self, boundary: int | None) -> int:
        """The chain's end, found by listing the objects from a known boundary on."""
        return self._listed_end(boundary)[0]

    def _listed_end(self, boundary: int | None, enough: int | None = None,
                    fetching: tuple[int, Future[list[Entry] | None] | None] | None = None
                    ) -> tuple[int, list[tuple[int, int]], str | None]:
        """(the chain's end, (first, size) of each object from ``boundary`` on, the ETag of
        ``low`` or None if there is none): one LIST of the log's keys, where the entry
        objects (``e/``) sort before the marks, and the last object's count (a small one
        is fetched whole and kept: a reader of the tail reads it next). If the last object
        starts at or past ``enough``, its start is returned instead: a boundary, all a
        read of a range that ends at ``enough`` needs to know of the end. ``fetching``:
        (first, its object being fetched), whose count needs no request of its own."""
        start_after = None if not boundary else self._key(boundary - 1)
        while True:
            listed, low_tag = [], None
            for key, size, etag in self._listed_keys(self._base, start_after):
                if key.startswith(self._entries):
                    listed.append((self._first_of(key), size))
                elif key == self._base + "low":
                    low_tag = etag
            if not listed:
                return boundary or 0, listed, low_tag
            first, size = listed[-1]
            if enough is not None and first >= enough:
                return first, listed, low_tag
            if fetching is not None and fetching[0] == first and fetching[1] is not None:
                entries = fetching[1].result()
                if entries is not None:
                    return first + len(entries), listed, low_tag
            try:
                if size <= CACHED_OBJECT_BYTES:
                    return first + len(self._object_entries(first)), listed, low_tag
                return first + self._count(self._key(first)), listed, low_tag
            except OffsetOutOfRange:
                continue  # deleted since the LIST: the low watermark passed it, newer ones exist

    def _known(self) -> int | None:
        with self._lock:
            if self._high is not None:
                return self._high
        hint, _ = self._mark_object("hint")
        return hint

    def _advance(self, boundary: int) -> int:
        with self._lock:
            self._high = boundary if self._high is None else max(self._high, boundary)
            return self._high

    def high_watermark(self) -> int:
        return self._advance(self._end_from(self._known()))

    def low_watermark(self) -> int:
        low, _ = self._mark_object("low")
        return low or 0

    def _low_listed(self, etag: str | None) -> int:
        """The low watermark, given the ETag a LIST just saw for ``low`` (None: absent): a
        GET only if it differs from the one this handle last read. An ETag names one
        version of an object (the conditional replace of ``low`` relies on it too)."""
        if etag is None:
            return 0
        with self._lock:
            seen = self._low_seen
        if etag and seen is not None and seen[0] == etag:
            return seen[1]
        return self.low_watermark()

    # -- appending ---------------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> list[int]:
        offsets: list[int] = []
        for i in range(0, len(records), MAX_RECORDS):
            offsets += self._append_object(records[i:i + MAX_RECORDS])
        return offsets

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        """Appends run on one thread per handle, in the order they were handed over, so
        encoding the next entries overlaps this one's upload."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"s3-{self.name}")
            executor = self._executor
        return executor.submit(self.append, list(records))

    def expect_append(self, nbytes: int) -> None:
        """List the end now for a large append the writer is still encoding, so that its
        LIST overlaps the encoding instead of delaying the create."""
        if nbytes <= OPTIMISTIC_BYTES:
            return
        with self._lock:
            if self._closed or (self._end_ahead is not None
                                and not self._end_ahead[1].done()):
                return
        listing = self._reader_pool().submit(self.high_watermark)
        with self._lock:
            self._end_ahead = (time.monotonic(), listing)

    def _end_listed(self) -> Future[int]:
        """The end for a large append: the LIST ``expect_append`` started, if recent, or a
        new one (it runs while the frames are built)."""
        with self._lock:
            ahead, self._end_ahead = self._end_ahead, None
        if ahead is not None and time.monotonic() - ahead[0] <= END_AHEAD_S and not (
                ahead[1].done() and ahead[1].exception() is not None):
            return ahead[1]  # (a failed one is asked again: the append's own answer counts)
        return self._reader_pool().submit(self.high_watermark)

    def _append_object(self, records: Sequence[Record]) -> list[int]:
        if not records:
            return []
        self._writable()
        # a large append lists the end first (a LIST costs less than a create that loses)
        end: Future[int] | None = None
        if sum(len(r.value) for r in records) > OPTIMISTIC_BYTES:
            end = self._end_listed()
        now = int(time.time() * 1000)
        parts = []
        for index, record in enumerate(records):  # frames hold their index in the object
            head, value = frame_parts(index, now, record)
            parts += [head, value]
        body = b"".join(parts)  # takes any buffer (an Arrow value): the one copy of a value
        count, token = len(records), uuid.uuid4().hex
        with self._append_lock:
            listed_end = None if end is None else end.result()
            with self._lock:  # this handle's own appends may have ended past that listing
                first = self._high if listed_end is None else max(listed_end, self._high or 0)
            if first is None or (listed_end is None and len(body) > OPTIMISTIC_BYTES):
                first = self.high_watermark()
            while True:
                while not self._create(first, body, count, token):
                    first = self._end_from(first)  # another writer won it: past the end now
                if self.low_watermark() <= first:
                    break
                # the boundary was an object a cleaner deleted since this handle learned
                # it: ours is below the low watermark, in no reader's log. Append again
                # past the end, listed from ours on (the chain's last object is kept, so
                # it starts past ours), as after a lost create
                self._discard(first)
                first = self._end_from(first)
            self._advance(first + count)
        if len(body) <= CACHED_OBJECT_BYTES:  # the committer reads its own record back
            self._keep(first, [Entry(first + i, bytes(r.key), bytes(parts[2 * i + 1]),
                                     tuple(r.headers), now) for i, r in enumerate(records)])
        if first // HINT_EVERY != (first + count) // HINT_EVERY:
            self._write_hint(first + count)
        return list(range(first, first + count))

    def _create(self, first: int, body: bytes, count: int, token: str) -> bool:
        """Create the object at ``first``; True once ours is there, False if another's is."""
        key = self._key(first)
        while True:
            try:
                self._client.put_object(Bucket=self._bucket, Key=key, Body=body, IfNoneMatch="*",
                                        Metadata={"count": str(count), "token": token})
                return True
            except ERRORS as exc:
                if is_code(exc, CONFLICT):
                    continue  # a racing create in flight: ask again, one of them gets 412
                if not (is_code(exc, PRECONDITION) or is_transient(exc)):
                    typed(exc, self._config, f"appending at offset {first} (log {self.name})",
                          namespace=self.namespace, log=self.name)
                return self._settle(key, first, token, exc)

    def _discard(self, first: int) -> None:
        """Delete this handle's own object at ``first``, created below the low watermark:
        no reader reads there, and a cleaner pass deletes it if this fails."""
        try:
            self._client.delete_object(Bucket=self._bucket, Key=self._key(first))
        except ERRORS as exc:
            log.warning("namespace=%s log=%s: could not delete the object this handle created "
                        "below the low watermark at offset %d (%s); the next cleaner pass "
                        "deletes it", self.namespace, self.name, first, type(exc).__name__)
        log.info("namespace=%s log=%s: offset %d, where this handle's append landed, was "
                 "below the low watermark (deleted since the handle learned the end): "
                 "appending again at the end", self.namespace, self.name, first)

    def _settle(self, key: str, first: int, token: str, exc: BaseException) -> bool:
        """Whose object is at ``key`` after a create answered 412 or not at all."""
        try:
            meta = self._client.head_object(Bucket=self._bucket, Key=key).get("Metadata", {})
        except ERRORS as head_exc:
            meta = None if is_code(head_exc, MISSING) else head_exc
        if isinstance(meta, dict):
            return meta.get("token") == token
        if is_code(exc, PRECONDITION) and meta is None:
            return False  # deleted since (below the low watermark): the chain moved past it
        raise AppendIndeterminate(
            f"the append at offset {first} may or may not be stored: the create of "
            f"s3://{self._bucket}/{key} failed ({type(exc).__name__}: {str(exc)[:200]}) and "
            "the object could not be looked up; retry the same operation once S3 is healthy "
            "(a WAL commit of the same writer step is idempotent)",
            namespace=self.namespace, log=self.name, offset=first)

    def _write_hint(self, boundary: int) -> None:
        """Store a recent boundary for the next open to list from. The append it follows
        is durable already, so a failure here is logged, not raised: an older hint only
        makes the next open list a little more."""
        try:
            self._client.put_object(Bucket=self._bucket, Key=self._base + "hint",
                                    Body=_mark(boundary))
        except ERRORS as exc:
            log.warning("namespace=%s log=%s: could not store the hint at offset %d (%s); the "
                        "next open lists from an older one", self.namespace, self.name,
                        boundary, type(exc).__name__)

    # -- reading -----------------------------------------------------------------------

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        """One LIST of the log's keys from the boundary this handle knows finds the end,
        the objects of the range and the version of ``low`` at once (``low`` is fetched
        only if it changed). A range up to that boundary (a step's run, read by a reader
        that replayed its commit) lists nothing: ``low`` is fetched instead. The first
        object of a range with an end is fetched from the start, beside those requests,
        and no entry is yielded before ``low`` was checked."""
        head: Future[list[Entry] | None] | None = None
        if end is not None and start < end:  # taken here: the read ahead below replaces it
            head = self._reader_pool().submit(self._object_at, start, self._take_ahead(start))
        try:
            boundary = self._known()
            with self._lock:
                sequential = self._last_stop == start
            if sequential and end is not None and boundary is not None and start < end < boundary:
                self._read_ahead(end)
            if end is not None and boundary is not None and end <= boundary:
                high, listed, low = boundary, None, self.low_watermark()
            else:
                high, listed, low_tag = self._listed_end(boundary, end, (start, head))
                high = self._advance(high)
                low = self._low_listed(low_tag)
            self.check_range(start, low, high)
        except BaseException:
            if head is not None:
                head.cancel()
            raise
        stop = high if end is None else min(end, high)
        with self._lock:
            self._last_stop = stop
        if listed is not None and boundary is not None and start >= boundary:
            return self._iter(start, stop, iter([o for o in listed if o[0] < stop]), head)
        return self._iter(start, stop, head=head)

    def _iter(self, start: int, stop: int, objects: Iterator[tuple[int, int]] | None = None,
              head: Future[list[Entry] | None] | None = None) -> Iterator[Entry]:
        """The entries of ``[start, stop)``: the objects are listed (a page holds 1,000)
        and fetched up to ``READ_AHEAD`` at a time, in order, so a range of small objects
        (the commits log's records) costs round trips / ``READ_AHEAD``, in bounded memory.
        ``head``: the object at ``start`` (None if none starts there), being fetched."""
        if start >= stop:
            return
        expect = None
        if objects is None or head is not None:  # most ranges start an object: one GET
            first_object = self._object_at(start) if head is None else head.result()
            if first_object is not None:
                expect = yield from self._yield_object(start, first_object, None, start, stop)
                if expect >= stop:
                    return
            if objects is None:
                objects = self._objects(start if expect is None else expect, stop)
            elif expect is not None:
                objects = (o for o in objects if o[0] >= expect)
        window: deque[tuple[int, int, Future[list[Entry]]]] = deque()
        in_flight = 0
        for first, size in objects:
            window.append((first, size, self._reader_pool().submit(self._object_entries, first)))
            in_flight += size
            while window and (len(window) >= READ_AHEAD or in_flight > READ_AHEAD_BYTES):
                first_done, size_done, done = window.popleft()
                in_flight -= size_done
                expect = yield from self._yield_object(first_done, done.result(), expect,
                                                       start, stop)
        while window:
            first_done, _, done = window.popleft()
            expect = yield from self._yield_object(first_done, done.result(), expect, start, stop)

    def _yield_object(self, first: int, entries: list[Entry], expect: int | None, start: int,
                      stop: int) -> Iterator[Entry]:
        """Yield an object's entries in ``[start, stop)``; the offset the next must start at."""
        if expect is not None and first != expect:
            raise CorruptEntryError(f"the chain of entry objects breaks: the object after "
                                    f"offset {expect - 1} starts at {first}",
                                    namespace=self.namespace, log=self.name, offset=expect)
        for entry in entries:
            if start <= entry.offset < stop:
                yield entry
        return first + len(entries)

    # -- deleting ----------------------------------------------------------------------

    def delete_before(self, offset: int) -> None:
        self._writable()
        offset = min(offset, self.high_watermark())
        while True:
            low, etag = self._mark_object("low")
            if low is not None and offset <= low:
                offset = low
                break
            condition = {"IfMatch": etag} if etag else {"IfNoneMatch": "*"}
            try:
                self._client.put_object(Bucket=self._bucket, Key=self._base + "low",
                                        Body=_mark(offset), **condition)
                break
            except ERRORS as exc:
                if not is_code(exc, PRECONDITION + CONFLICT):
                    typed(exc, self._config, f"moving the low watermark to {offset} "
                          f"(log {self.name})", namespace=self.namespace, log=self.name)
        self._delete_objects_below(offset)

    def _delete_objects_below(self, low: int) -> None:
        """Delete the objects that end at or below ``low``: each ends where the next
        starts, so a listing tells which; the last object is kept (it holds the end)."""
        doomed: list[str] = []
        previous = None
        for key in self._keys(None):
            first = self._first_of(key)
            if first > low:
                break
            if previous is not None:
                doomed.append(previous)
            previous = key
        for i in range(0, len(doomed), LIST_PAGE):
            try:
                answer = self._client.delete_objects(Bucket=self._bucket, Delete={
                    "Objects": [{"Key": k} for k in doomed[i:i + LIST_PAGE]], "Quiet": True})
            except ERRORS as exc:
                typed(exc, self._config, f"deleting entry objects below the low watermark "
                      f"(log {self.name})", **self._where())
            errors = answer.get("Errors") or []
            if errors:
                first_error = errors[0]
                raise DurableWalError(
                    f"S3 refused to delete {len(errors)} entry objects below offset {low}, "
                    f"first {first_error.get('Key')}: {first_error.get('Code')} "
                    f"({first_error.get('Message')})", namespace=self.namespace, log=self.name)

    def close(self) -> None:
        with self._lock:
            pools = [p for p in (self._executor, self._readers) if p is not None]
            self._executor = self._readers = None
            self._closed, self._ahead, self._end_ahead = True, {}, None
        for pool in pools:
            pool.shutdown(wait=True)
