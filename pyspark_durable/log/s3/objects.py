"""The entry objects of one S3 log: their keys, the requests that read them, their
frames checked, and the copies a handle keeps and fetches ahead.

An entry object never changes once created (:mod:`pyspark_durable.log.s3.log` says
why), so what is read of one may be kept and reused; this is everything a log handle
knows of single objects. Which object comes next, where the chain ends and what may be
written are :class:`~pyspark_durable.log.s3.log.S3Log`'s.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from pyspark_durable.errors import CorruptEntryError, DurableWalError, OffsetOutOfRange
from pyspark_durable.log.base import Entry, Log
from pyspark_durable.log.file.frames import FRAME_HEAD, read_body
from pyspark_durable.log.s3.client import (
    ERRORS,
    MISSING,
    S3Config,
    get_or_none,
    is_code,
    listed,
    typed,
)

MAX_RECORDS = 1024  # entries per object: the object holding an offset starts at most this far back
LIST_PAGE = 1000  # S3's page
READ_AHEAD = 16  # objects a read fetches at once
# objects fetched ahead for a reader of ranges in order: the next one's GET and the one
# after it overlap the caller's work, so a step costs its ``low`` check, not a whole GET
SEQUENTIAL_AHEAD = 2
# objects of at most this much (commit records) are kept once written or read: an object
# never changes, and a committer reads its own record back, a reader the tail it listed
CACHED_OBJECT_BYTES = 64 << 10
CACHE_BYTES = 4 << 20  # per log handle


def plain_etag(value: str | None) -> str:
    """An ETag as a GET and a LIST both give it (servers differ in quoting)."""
    return (value or "").strip('"')


class ObjectLog(Log):
    """A log handle's view of its entry objects one at a time (:class:`~pyspark_durable.log.s3.log.S3Log`
    is the log); the requests it makes and the objects it keeps."""

    def __init__(self, namespace: str, name: str, client: Any, config: S3Config, base: str,
                 writable: Callable[[], None], boundary: int | None = None) -> None:
        """``base``: the log's key prefix; ``writable``: the store's check before a write;
        ``boundary``: one known already (0, always one, for a log just created)."""
        super().__init__(namespace, name)
        self._writable = writable
        self._client = client
        self._config = config
        self._bucket = config.bucket
        self._base = base
        self._entries = f"{self._base}e/"
        self._high: int | None = boundary  # a boundary this handle knows (only grows)
        self._lock = threading.Lock()
        self._append_lock = threading.Lock()  # one create at a time per handle: appends keep order
        self._executor: ThreadPoolExecutor | None = None
        self._readers: ThreadPoolExecutor | None = None  # fetch the objects of a range ahead
        # small objects, oldest first: first offset -> (entries, bytes)
        self._cache: OrderedDict[int, tuple[list[Entry], int]] = OrderedDict()
        self._cache_bytes = 0
        self._low_seen: tuple[str, int] | None = None  # (ETag, offset) of ``low`` as last read
        self._last_stop: int | None = None  # where the last read ended
        self._ahead: dict[int, Future[list[Entry] | None]] = {}  # first -> its fetch, ahead
        # the end being listed for the next large append: (monotonic start, its LIST)
        self._end_ahead: tuple[float, Future[int]] | None = None
        self._closed = False

    # -- requests ----------------------------------------------------------------------

    def _where(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "log": self.name}

    def _key(self, first: int) -> str:
        return f"{self._entries}{first:020d}"

    def _first_of(self, key: str) -> int:
        return int(key[len(self._entries):])

    def _get(self, key: str, doing: str) -> tuple[bytes, dict[str, Any]] | None:
        """An object's body and the answer's other fields (Metadata, ETag), None if it does
        not exist."""
        return get_or_none(self._client, self._config, key, f"{doing} (log {self.name})",
                           self._where())

    def _head(self, key: str, doing: str) -> dict[str, str] | None:
        """An object's metadata, None if it does not exist."""
        try:
            return self._client.head_object(Bucket=self._bucket, Key=key).get("Metadata", {})
        except ERRORS as exc:
            if is_code(exc, MISSING):
                return None
            typed(exc, self._config, f"{doing} (log {self.name})", namespace=self.namespace,
                  log=self.name)

    def _keys(self, start_after: str | None) -> Iterator[str]:
        """Entry object keys after ``start_after`` (all, if None), ascending, page by page."""
        for key, _ in self._listing(start_after):
            yield key

    def _listing(self, start_after: str | None) -> Iterator[tuple[str, int]]:
        """(key, size) of the entry objects after ``start_after`` (all, if None), ascending."""
        for key, size, _ in self._listed_keys(self._entries, start_after):
            yield key, size

    def _listed_keys(self, prefix: str, start_after: str | None) -> Iterator[tuple[str, int, str]]:
        """(key, size, ETag) of the objects below ``prefix`` after ``start_after``, ascending."""
        kwargs: dict[str, Any] = {"Prefix": prefix, "MaxKeys": LIST_PAGE}
        if start_after is not None:
            kwargs["StartAfter"] = start_after
        for page in listed(self._client, self._config, f"listing entry objects (log {self.name})",
                           self._where(), **kwargs):
            for item in page.get("Contents", ()):
                yield item["Key"], int(item.get("Size", 0)), plain_etag(item.get("ETag"))

    def _count(self, key: str, meta: dict[str, str] | None = None) -> int:
        meta = meta if meta is not None else self._head(key, "reading an entry object's size")
        if meta is None:  # only a cleaner deletes, below the low watermark
            raise OffsetOutOfRange(f"entry object s3://{self._bucket}/{key} was deleted since "
                                   "it was listed", namespace=self.namespace, log=self.name)
        count = meta.get("count", "")
        if not count.isdigit() or not 0 < int(count) <= MAX_RECORDS:
            raise CorruptEntryError(f"entry object s3://{self._bucket}/{key} has no valid "
                                    f"count in its metadata ({count!r})",
                                    namespace=self.namespace, log=self.name)
        return int(count)

    # -- one object at a time ---------------------------------------------------------

    def _reader_pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(READ_AHEAD,
                                                   thread_name_prefix=f"s3-read-{self.name}")
            return self._readers

    def _objects(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """(first offset, size) of each object holding an offset of ``[start, stop)``.

        Most reads start at an object's first offset (a reader catching up, a run that
        starts an append), so the listing starts there; only if no object starts at
        ``start`` is the holder looked for in the ``MAX_RECORDS`` offsets before it."""
        listing = self._listing(self._key(start - 1) if start > 0 else None)
        head = next(listing, None)
        if head is not None and self._first_of(head[0]) == start:
            yield start, head[1]
            for key, size in listing:
                first = self._first_of(key)
                if first >= stop:
                    return
                yield first, size
            return
        yield from self._objects_around(start, stop)

    def _objects_around(self, start: int, stop: int) -> Iterator[tuple[int, int]]:
        """:meth:`_objects` for a ``start`` inside an object."""
        floor = start - MAX_RECORDS  # the object holding ``start`` begins after it
        holder: tuple[int, int] | None = None  # the last object seen that starts <= start
        for key, size in self._listing(self._key(floor) if floor >= 0 else None):
            first = self._first_of(key)
            if first <= start:
                holder = (first, size)
                continue
            if holder is None:
                break  # the object holding ``start`` is gone
            if holder[0] <= start:
                yield holder
                holder = (stop, 0)  # yielded; every later object up to ``stop`` follows
            if first >= stop:
                return
            yield first, size
        if holder is None:
            raise OffsetOutOfRange(f"offset {start} is below the low watermark "
                                   f"{self.low_watermark()} (its object was deleted)",
                                   namespace=self.namespace, log=self.name)
        if holder[0] <= start:
            yield holder

    def _object_entries(self, first: int) -> list[Entry]:
        """The entries of the object at ``first``, which the log's chain runs through."""
        entries = self._object_at(first)
        if entries is None:
            low = self.low_watermark()
            if first < low:
                raise OffsetOutOfRange(f"offset {first} is below the low watermark {low} "
                                       "(deleted while it was read)", namespace=self.namespace,
                                       log=self.name)
            raise CorruptEntryError(f"entry object s3://{self._bucket}/{self._key(first)} is "
                                    "missing though the log's chain runs through it",
                                    namespace=self.namespace, log=self.name, offset=first)
        return entries

    def _read_ahead(self, first: int, depth: int = SEQUENTIAL_AHEAD) -> None:
        """Start fetching the object at ``first`` and, once its end is known, the ``depth``
        - 1 objects after it: a reader that read the ranges before them one after another
        (steps read in order) is likely to read them next. At most ``SEQUENTIAL_AHEAD``
        objects per handle are fetched ahead, never past the end this handle knows; an
        object never changes, and a read still checks ``low`` before yielding it."""
        with self._lock:
            if self._closed:
                return
        pool = self._reader_pool()
        with self._lock:
            if self._closed or first in self._cache or depth < 1 or self._high is None or \
                    first >= self._high:
                return
            ahead = self._ahead.get(first)
            if ahead is None:
                if len(self._ahead) >= SEQUENTIAL_AHEAD:
                    return
                ahead = self._ahead[first] = pool.submit(self._fetch_object, first)
        if depth > 1:
            ahead.add_done_callback(lambda done: self._ahead_of(first, done, depth - 1))

    def _ahead_of(self, first: int, done: Future[list[Entry] | None], depth: int) -> None:
        """Fetch ahead after the object at ``first``, fetched ahead (a failure is left to
        the read that takes it)."""
        if done.cancelled() or done.exception() is not None or not done.result():
            return
        self._read_ahead(first + len(done.result() or ()), depth)

    def _take_ahead(self, first: int) -> Future[list[Entry] | None] | None:
        """The fetch of the object at ``first`` started ahead of its read, if one was; the
        fetches of objects before it are dropped (the reader went past them)."""
        with self._lock:
            for stale in [k for k in self._ahead if k < first]:
                del self._ahead[stale]
            return self._ahead.pop(first, None)

    def _object_at(self, first: int, ahead: Future[list[Entry] | None] | None = None
                   ) -> list[Entry] | None:
        """The entries of the object starting at ``first``, None if none starts there;
        small ones are kept (objects never change once created). ``ahead``: its fetch,
        started ahead of the read."""
        with self._lock:
            cached = self._cache.get(first)
        ahead = ahead or self._take_ahead(first)
        if cached is not None:
            return cached[0]
        if ahead is not None:
            try:
                return ahead.result()
            except DurableWalError:
                pass  # fetched ahead of its read: asked again, its error is the read's own
        return self._fetch_object(first)

    def _fetch_object(self, first: int) -> list[Entry] | None:
        """:meth:`_object_at` without the handle's copies: one GET."""
        key = self._key(first)
        got = self._get(key, f"reading entries at offset {first}")
        if got is None:
            return None
        body, answer = got
        entries = self._parsed(key, first, body, answer.get("Metadata", {}))
        self._keep(first, entries)
        return entries

    def _keep(self, first: int, entries: list[Entry]) -> None:
        size = sum(len(e.value) + len(e.key) for e in entries)
        if size > CACHED_OBJECT_BYTES:
            return
        with self._lock:
            self._cache[first] = (entries, size)
            self._cache_bytes += size
            while self._cache_bytes > CACHE_BYTES:
                _, (_, dropped) = self._cache.popitem(last=False)
                self._cache_bytes -= dropped

    def _parsed(self, key: str, first: int, body: bytes, meta: dict[str, str]) -> list[Entry]:
        """An object's entries, every frame checked (CRC, its index in the object)."""
        count = self._count(key, meta)
        stream = io.BytesIO(body)
        entries = []
        for index in range(count):
            head = stream.read(FRAME_HEAD.size)
            entry = None
            if len(head) == FRAME_HEAD.size:
                length, crc = FRAME_HEAD.unpack(head)
                entry = read_body(stream, length, crc) if length <= len(body) else None
            if entry is None or entry.offset != index:
                raise CorruptEntryError(f"entry object s3://{self._bucket}/{key} is damaged at "
                                        f"its entry {index} (bad frame or CRC)",
                                        namespace=self.namespace, log=self.name,
                                        offset=first + index)
            entries.append(Entry(first + index, entry.key, entry.value, entry.headers,
                                 entry.timestamp_ms))
        return entries
