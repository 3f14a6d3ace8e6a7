"""The log contract: an ordered, durable, append-only log of entries.

A :class:`LogStore` holds the logs of one namespace. Each log is named; region logs
are named ``region_{id}`` (the Kafka backend maps that to the topic
``{namespace}_region_{id}``), and the WAL layer keeps its own log, ``commits``, next
to them. A store also keeps small named, *versioned* snapshots, which is where the
WAL's state snapshots go (named ``wal``).

The contract, which every backend passes (``tests/log/test_log_contract.py``):

* ``append`` returns the offsets of its records only once they are durable
  (file: fsync'd; Kafka: acks=all). Offsets of a log are dense: 0, 1, 2, ...
* ``append_async`` hands records over and returns a future of the same offsets,
  resolved only once they are durable; appends of one thread keep their order.
  A writer with many entries keeps the log busy instead of waiting for each one.
* ``read(start, end)`` yields entries in offset order, in bounded memory, up to the
  high watermark seen when it started; ``start`` below the low watermark raises
  :class:`OffsetOutOfRange`, ``start`` equal to the high watermark yields nothing.
* ``delete_before(offset)`` moves the low watermark up (never the high one);
  entries below it are never returned again.
* ``free(ranges)``, where ``can_free`` (file, memory; not Kafka, which deletes only a
  prefix): the entries of those offset ranges are durably freed, their space given
  back, and never returned again. ``read`` skips a freed offset (a range reader gets
  what is there), ``read_acknowledged`` raises :class:`EntryFreed` (its caller needs
  every entry), ``freed_ranges()`` lists what is freed in ``[low, high)``. Offsets
  stay dense: the high watermark and every other entry are unchanged.
* ``write_snapshot(name, version, data)`` stores one version durably and atomically;
  ``read_snapshot(name)`` returns the highest version stored, so snapshots never go
  backwards however writers race (a slow writer of an older version cannot hide a
  newer one). ``delete_snapshot`` removes one version (pruning old ones).
* ``release_reserve`` frees the room a store keeps for the records that free space
  (file: a preallocated file per namespace), and ``restore_reserve`` takes it back;
  a store whose storage cannot fill up (Kafka's brokers manage their disks, memory)
  keeps none.

This layer knows nothing of steps, tables or Spark.
"""

from __future__ import annotations

import enum
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

from pyspark_durable.errors import (
    ConfigError,
    CorruptEntryError,
    DurableWalError,
    EntryFreed,
    FreeUnsupported,
    OffsetOutOfRange,
)

NAME_RE = re.compile(r"[A-Za-z0-9_-]{1,200}")  # always fullmatch: "$" would match before "\n"
REGION_PREFIX = "region_"

Headers = tuple[tuple[str, bytes], ...]


def check_name(kind: str, name: str) -> str:
    """Names end up in folder and Kafka topic names: letters, digits, ``_`` and ``-``."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ConfigError(
            f"{kind} name {name!r} is invalid: use 1-200 letters, digits, '_' or '-'"
        )
    return name


def is_decimal(text: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also takes ``"\u00b2"`` (which ``int`` refuses) and
    ``"\u0667"`` (which ``int`` reads as 7), so a stray name would parse or crash."""
    return text.isascii() and text.isdigit()


# the version a store lists a snapshot under that a release before commit ee5e358 kept
# unversioned (one file ``snapshots/{name}``, one key ``snapshot/{name}``): below any other
UNVERSIONED = 0


def check_version(version: int) -> int:
    """Snapshot versions are u64 integers (the WAL uses commits-log offsets)."""
    if not isinstance(version, int) or isinstance(version, bool) or not 0 <= version < 1 << 64:
        raise ConfigError(f"snapshot version {version!r} is not a non-negative integer")
    return version


def region_log_name(region_id: int) -> str:
    if not isinstance(region_id, int) or isinstance(region_id, bool) or region_id < 0:
        raise ConfigError(f"region id {region_id!r} is not a non-negative integer")
    return f"{REGION_PREFIX}{region_id}"


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Offset ranges ``[start, end)`` as ascending, disjoint, non-empty ranges."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(r for r in ranges if r[0] < r[1]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


@dataclass(frozen=True, slots=True)
class Record:
    """What a writer appends: an opaque key and value, plus small named headers."""

    key: bytes
    value: bytes  # or any read-only buffer (the Arrow codec hands over its Arrow buffer)
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class Entry:
    """What a reader gets back: a record with its offset and append time."""

    offset: int
    key: bytes
    value: bytes
    headers: Headers
    timestamp_ms: int

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


@dataclass(frozen=True, slots=True)
class Damaged:
    """An offset :func:`read_around_damage` could not read, and why."""

    offset: int
    error: CorruptEntryError


def read_around_damage(read: Callable[..., Iterator[Entry]], start: int,
                       end: int | None = None) -> Iterator[Entry | Damaged]:
    """The entries of ``read(start, end)``, and a :class:`Damaged` in place of each entry
    the backend could not read: the read goes on at the next offset, so one damaged
    entry costs that entry alone; the caller decides what it costs the reader.

    ``read`` is called once before this returns, so a range error (``OffsetOutOfRange``)
    raises here, not when the entries are iterated.
    """
    return _around(read, read(start, end), start, end)


def _around(read: Callable[..., Iterator[Entry]], entries: Iterator[Entry],
            start: int, end: int | None) -> Iterator[Entry | Damaged]:
    while True:
        try:
            for entry in entries:
                start = entry.offset + 1
                yield entry
            return
        except CorruptEntryError as exc:
            at = exc.where.get("offset")
            if not isinstance(at, int) or at < start:
                raise  # not one entry's damage: nothing to read around
            yield Damaged(at, exc)
            start = at + 1
            if end is not None and start >= end:
                return
            entries = read(start, end)


class Log(ABC):
    """One ordered, durable log (a region, or one of the WAL's own logs)."""

    def __init__(self, namespace: str, name: str) -> None:
        self.namespace = namespace
        self.name = name
        # damage a backend tolerated or repaired while reading (e.g. a damaged file it
        # could rebuild): nothing a read returns is affected, but `check` reports it
        self.repairs: list[str] = []

    @abstractmethod
    def append(self, records: Sequence[Record]) -> list[int]:
        """Append records; return their offsets once they are durable."""

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        """Start an append; the future gives its offsets once the records are durable.

        Backends that can overlap work override it (file: appends share a group
        commit; Kafka: they share produce requests). This default appends in place.
        """
        fut: Future[list[int]] = Future()
        try:
            fut.set_result(self.append(records))
        except DurableWalError as exc:
            fut.set_exception(exc)
        return fut

    def expect_append(self, nbytes: int) -> None:
        """A writer is about to append about ``nbytes`` (it is encoding them now): a log
        whose append first asks where its end is (S3) may ask meanwhile. The default,
        for logs whose appends need no such question, does nothing."""
        return

    @abstractmethod
    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        """Yield entries with ``start <= offset < end`` (``end`` clamped to the high watermark).

        A ``start`` outside [low, high] raises :class:`OffsetOutOfRange` from this call,
        before any entry is yielded (callers tell a cleaned range from a shorter log).
        """

    def read_acknowledged(self, start: int, end: int) -> Iterator[Entry]:
        """Yield the entries of ``[start, end)``, a range the caller knows was acknowledged
        (appended and made durable, by this process or another).

        Unlike :meth:`read`, ``end`` is not clamped to this handle's view of the high
        watermark: a backend whose view can lag behind another process's acknowledged
        append (Kafka) asks again within a bound and then raises a typed error naming
        the end it saw, never returning fewer entries. A local log knows its end
        exactly, so this default is :meth:`read`: a short read there is real loss.
        """
        entries = self.read(start, end)  # its range check raises here, not when iterated
        return self._every(start, end, entries) if self.can_free else entries

    def read_following(self, start: int, end: int) -> Iterator[Entry]:
        """Yield the entries of ``[start, end)`` for a reader going on from ``start``, where
        it stopped, to ``end``, an end it knows was acknowledged (its own append's).

        A replay of the commits log reads this way after each of its appends. A backend
        whose bounds cost requests (Kafka: two ListOffsets, one of them the logical low
        watermark's topic) may skip them here: the range is below an acknowledged end,
        and one the backend no longer holds still raises :class:`OffsetOutOfRange`, if
        only when the read reaches it. An entry a deletion hid whose bytes the backend
        still holds may be yielded as written. This default is :meth:`read_acknowledged`.
        """
        return self.read_acknowledged(start, end)

    def _every(self, start: int, end: int, entries: Iterator[Entry]) -> Iterator[Entry]:
        """``entries`` of ``[start, end)``, each offset of which must be there: one that
        was freed (``read`` skips it) is :class:`EntryFreed`."""
        expect = start
        for entry in entries:
            if entry.offset != expect:
                self._freed_error(expect)
            expect += 1
            yield entry
        if expect < end and expect < self.high_watermark():
            self._freed_error(expect)

    def _freed_error(self, offset: int) -> None:
        raise EntryFreed(f"offset {offset} was freed (no step referred to it when a cleaner "
                         "freed it)", namespace=self.namespace, log=self.name, offset=offset)

    can_free: ClassVar[bool] = False  # can entries in the middle of the log be freed?

    def free(self, ranges: Sequence[tuple[int, int]]) -> None:
        """Free the entries of the offset ranges ``[start, end)``, durably, and give their
        space back; offsets outside ``[low, high)`` or already freed are ignored.
        A backend that cannot (``can_free`` false) raises :class:`FreeUnsupported`."""
        raise FreeUnsupported(f"the {type(self).__name__} backend cannot free single entries; "
                              "entries go only when the low watermark passes them",
                              namespace=self.namespace, log=self.name)

    def freed_ranges(self) -> list[tuple[int, int]]:
        """The freed offset ranges inside ``[low, high)``, ascending and disjoint."""
        return []

    @abstractmethod
    def low_watermark(self) -> int:
        """The first offset still readable."""

    @abstractmethod
    def high_watermark(self) -> int:
        """The offset the next appended entry will get (one past the last entry)."""

    @abstractmethod
    def delete_before(self, offset: int) -> None:
        """Entries below ``offset`` are no longer needed; they are never read again."""

    def close(self) -> None:  # noqa: B027 - backends with resources override it
        """Release resources; the log's content stays."""

    def check_range(self, start: int, low: int, high: int) -> None:
        """Shared boundary rule of ``read``: typed errors naming the valid range."""
        if start < low:
            raise OffsetOutOfRange(
                f"offset {start} is below the low watermark {low} (deleted); "
                f"readable offsets are [{low}, {high})",
                namespace=self.namespace, log=self.name,
            )
        if start > high:
            raise OffsetOutOfRange(
                f"offset {start} is past the high watermark {high}; "
                f"readable offsets are [{low}, {high})",
                namespace=self.namespace, log=self.name,
            )

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reserve(enum.StrEnum):
    """The reserve after :meth:`LogStore.restore_reserve` (the CLI prints the value)."""

    NONE = "none"  # this store keeps no reserve
    KEPT = "kept"  # it was in place
    RECREATED = "recreated"  # it had been released and is back
    MISSING = "missing"  # released, and the disk has no room for it yet


class LogStore(ABC):
    """The logs and snapshots of one namespace in one backend."""

    type_name: ClassVar[str]
    # at most how many records of a log a reader should read past a snapshot: None leaves
    # it to the reader; a store whose reads cost a request per record (S3: an object
    # each) asks for snapshots more often, which cost one write each
    snapshot_every_records: ClassVar[int | None] = None
    # how many copies of each entry a caller that cannot lose one entry should write,
    # adjacent and in one append: 2 where one damaged entry is the fault the store can
    # meet and both copies share the append's one sync (file: a flipped byte on a local
    # disk); 1 where the store already keeps copies or checks its own (Kafka's brokers
    # replicate and CRC their batches; S3 keeps an append in one object, so a second
    # copy inside it adds nothing)
    record_copies: ClassVar[int] = 1

    def __init__(self, namespace: str) -> None:
        self.namespace = check_name("namespace", namespace)

    @classmethod
    @abstractmethod
    def list_namespaces(cls, config: Mapping[str, Any]) -> list[str]:
        """Namespaces that exist in the storage the config points at."""

    @classmethod
    def namespaces_holding(cls, config: Mapping[str, Any], log: str) -> list[str]:
        """The namespaces of :meth:`list_namespaces` that hold a log named ``log``.

        A store lists every name its storage has room for a namespace under (a folder,
        a prefix); a caller that counts only those holding a given log asks here, so
        that each backend answers with the listing it already has. This one opens each
        listed store; backends that can tell from one listing override it."""
        found = []
        for name in cls.list_namespaces(config):
            store = cls(name, **config)  # type: ignore[call-arg]  # every backend takes its options
            try:
                if log in store.list_logs():
                    found.append(name)
            finally:
                store.close()
        return found

    def sibling_namespaces(self) -> list[str]:
        """The namespaces stored where this one is (for messages naming what exists)."""
        return []

    def location(self) -> str:
        """Where the store lives, for messages (a folder, a broker)."""
        return f"the {self.type_name} backend"

    @abstractmethod
    def list_logs(self) -> list[str]:
        """Names of the logs of this namespace."""

    @abstractmethod
    def open_log(self, name: str, create: bool = True) -> Log:
        """Open a log by name, creating it when asked (else :class:`LogNotFound`)."""

    @abstractmethod
    def write_snapshot(self, name: str, version: int, data: bytes) -> None:
        """Store ``data`` as version ``version`` of snapshot ``name``, durably and atomically."""

    @abstractmethod
    def snapshot_versions(self, name: str) -> list[int]:
        """The stored versions of snapshot ``name``, ascending."""

    @abstractmethod
    def read_snapshot_version(self, name: str, version: int) -> bytes | None:
        """One stored version of snapshot ``name`` (None if it was deleted meanwhile)."""

    @abstractmethod
    def delete_snapshot(self, name: str, version: int) -> None:
        """Remove one version of snapshot ``name`` (no error if it is gone)."""

    def read_snapshot(self, name: str) -> tuple[int, bytes] | None:
        """The highest stored version of snapshot ``name`` as ``(version, data)``, or None.

        A version deleted between listing and reading (a racing pruner) is skipped.
        """
        for version in reversed(self.snapshot_versions(name)):
            data = self.read_snapshot_version(name, version)
            if data is not None:
                return version, data
        return None

    def prune_snapshots(self, name: str, keep: int) -> None:
        """Delete every version of ``name`` but the ``keep`` highest ones."""
        versions = self.snapshot_versions(name)
        for version in versions[: max(0, len(versions) - keep)]:
            self.delete_snapshot(name, version)

    def settings_problems(self) -> list[tuple[str, str]]:
        """(log, problem) for every setting of the storage under which it would delete
        records by itself (Kafka: a topic's broker-side retention); [] when none can."""
        return []

    def access_warnings(self) -> list[str]:
        """What of the namespace's storage users it was not meant for can read, each with
        the command that tightens it; [] when the storage has no such modes (a broker's
        or a bucket's rights are granted outside the WAL)."""
        return []

    def release_reserve(self) -> bool:
        """Free the room kept for the records that free space, for a writer of those that
        got :class:`DiskFull`; whether any room was freed (False: none was kept)."""
        return False

    def restore_reserve(self) -> Reserve:
        """Take the room back once space was freed; never raises for lack of it (the
        reserve is then :attr:`Reserve.MISSING`, and the next cleaner pass tries again)."""
        return Reserve.NONE

    def close(self) -> None:  # noqa: B027 - backends with resources override it
        """Close every log opened through this store."""

    def reset(self) -> None:
        """Forget what is cached about the logs (their storage was replaced, e.g. a WAL
        recreated under a long-lived handle); logs are opened afresh on next use."""
        self.close()

    def list_regions(self) -> list[int]:
        return sorted(
            int(n[len(REGION_PREFIX):])
            for n in self.list_logs()
            if n.startswith(REGION_PREFIX) and is_decimal(n[len(REGION_PREFIX):])
        )

    def open_region(self, region_id: int, create: bool = True) -> Log:
        return self.open_log(region_log_name(region_id), create=create)

    def __enter__(self) -> LogStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
