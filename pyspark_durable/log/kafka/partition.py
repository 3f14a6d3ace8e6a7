"""Partition 0 of one topic, as a log and the registry both use it: appends, both ends,
and scans of a range, through the store's :class:`~pyspark_durable.log.kafka.pool.ClientPool`.

Implementation notes (why):

* **The high watermark is ListOffsets(latest)**, exact on Apache Kafka (see
  :meth:`Partition.bounds`); a read of a range below a known end asks nothing.
* **An acknowledged range is read to its end** (:meth:`Partition.await_end`): right
  after another process's acknowledgement, a leader change or a broker whose high
  watermark has not advanced yet can answer a shorter end, or a fetch can stop early.
  The end is asked again with backoff within ``request_timeout_ms``; a view that stays
  short is :class:`BackendUnavailable` naming both ends, never a short read (which the
  WAL would call corrupt).
* **Durable appends.** acks=all and idempotence are forced; an append returns when
  every record is acknowledged, else raises (the records that did land stay in the
  topic, as after any crash: the WAL's step commits decide what is visible).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

from pyspark_durable.errors import (
    AccessDenied,
    AuthenticationFailed,
    BackendUnavailable,
    DurableWalError,
)
from pyspark_durable.log.base import Entry, Record
from pyspark_durable.log.kafka.api import Reader, Sender
from pyspark_durable.log.kafka.oauth import refused_login
from pyspark_durable.log.kafka.pool import ClientPool
from pyspark_durable.log.kafka.probe import broker_reachability

log = logging.getLogger(__name__)

SCAN_CHUNK = 10_000  # entries asked of one fetch call
# an acknowledged range's end not seen yet: ask again after this long, doubling up to
# the cap (a lagging high watermark catches up within a replica fetch, milliseconds)
END_BACKOFF_S = 0.01
END_BACKOFF_MAX_S = 0.5


class Partition:
    """Partition 0 of ``topic``; ``where`` (namespace and log) is named by every error."""

    def __init__(self, pool: ClientPool, topic: str, where: Mapping[str, Any]) -> None:
        self.pool = pool
        self.settings = pool.settings
        self.topic = topic
        self.where = dict(where)
        self._known_high = 0  # highest high watermark seen (appends and fetches)
        self._lock = threading.Lock()
        self._closed = False

    @property
    def known_high(self) -> int:
        """The highest high watermark this handle has seen: a lower bound of the end."""
        return self._known_high

    # -- appending ------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> list[int]:
        """The offsets of ``records``, once every one is acknowledged (acks=all)."""
        fut = self.append_async(records)
        if not fut.done():
            sender = self.pool.sender()
            sender.hurry()  # the caller waits: do not linger
            wait_s = self.settings.wait_s
            if not sender.wait(fut, wait_s):
                raise self._refused_login(BackendUnavailable(
                    f"append to topic {self.topic} on Kafka broker "
                    f"{self.settings.bootstrap_servers} was not acknowledged within "
                    f"{wait_s:.0f}s (the records may or may not be stored; "
                    f"{broker_reachability(self.settings.bootstrap_servers)})",
                    **self.where,
                ), "producer", f"append to topic {self.topic} (the records may or may not be "
                   "stored)", sender)
        return fut.result()

    def _refused_login(self, exc: DurableWalError, client: str, what: str,
                       sender: Sender | None = None) -> DurableWalError:
        """``exc`` as the token endpoint's refusal of the client, if it is one
        (:func:`~pyspark_durable.log.kafka.oauth.refused_login`): a login refused under
        an open handle (a client secret rotated at the endpoint) looks like a timeout
        to both clients. The refused ``sender`` is replaced before the next send."""
        typed = refused_login(exc, self.settings.clients[client],
                              self.settings.request_timeout_ms / 1000, what, **self.where)
        if typed is not exc and sender is not None:
            sender.login_refused()
        return typed

    def _append_failure(self, exc: BaseException, done: int, count: int,
                        sender: Sender) -> BaseException:
        """An append's failure as its future's error: the authorizer's refusal as it is
        (so not stored); else naming how many records were acknowledged, retriable
        unless a login was refused."""
        if isinstance(exc, AccessDenied):
            return exc
        left = f"{done} of {count} records acknowledged (the rest may or may not be stored)"
        if isinstance(exc, AuthenticationFailed):
            return AuthenticationFailed(f"append to topic {self.topic}: {left}: {exc.reason}",
                                        **self.where)
        return self._refused_login(BackendUnavailable(
            f"append to topic {self.topic} on Kafka broker {self.settings.bootstrap_servers} "
            f"failed: {left}: {type(exc).__name__}: {exc}", **self.where),
            "producer", f"append to topic {self.topic}: {left}", sender)

    @contextmanager
    def _login_checked(self, what: str) -> Iterator[None]:
        """A read's retriable failure told as the endpoint's refusal, if it is one; a
        refusal kafka-python passes on from its token provider is placed."""
        what = f"{what} topic {self.topic}"
        try:
            yield
        except AuthenticationFailed as exc:
            if exc.where:
                raise
            raise AuthenticationFailed(f"{what}: {exc.reason}", **self.where) from None
        except BackendUnavailable as exc:
            typed = self._refused_login(exc, "consumer", what)
            if typed is exc:
                raise
            raise typed from None

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        """Send every record now; the future resolves when all are acknowledged.

        The producer batches records of many calls into shared requests, so a writer
        that does not wait between entries keeps the broker busy (linger_ms, batch_size).
        """
        out: Future[list[int]] = Future()
        if not records:
            out.set_result([])
            return out
        sender = self.pool.sender()
        offsets: list[int | None] = [None] * len(records)
        left = [len(records)]
        lock = threading.Lock()

        def acked(i: int, offset: int) -> None:
            with lock:
                offsets[i] = offset
                left[0] -= 1
                if left[0] or out.done():
                    return
            with self._lock:
                self._known_high = max(self._known_high, max(offsets) + 1)  # type: ignore[type-var]
            out.set_result(offsets)  # type: ignore[arg-type]

        def failed(exc: BaseException) -> None:
            with lock:
                if out.done():
                    return
                done = sum(o is not None for o in offsets)
                out.set_exception(self._append_failure(exc, done, len(records), sender))

        try:
            sender.send(self.topic, records, acked, failed, self.where)
        except AuthenticationFailed as exc:  # kafka-python's token provider, passed on
            if exc.where:
                raise
            raise AuthenticationFailed(f"append to topic {self.topic}: {exc.reason}",
                                       **self.where) from None
        except BackendUnavailable as exc:  # raised by the client's send (no metadata for
            if type(exc) is not BackendUnavailable:  # the topic in time): name the topic
                raise
            raise self._refused_login(
                BackendUnavailable(f"append to topic {self.topic} failed: {exc.reason}",
                                   **self.where),
                "producer", f"append to topic {self.topic}", sender) from exc
        return out

    # -- bounds -----------------------------------------------------------------

    @contextmanager
    def _reader(self) -> Iterator[Reader]:
        """Borrow a reader of the partition from the pool."""
        if self._closed:
            raise BackendUnavailable("log is closed", **self.where)
        with self.pool.borrow(self.topic, self.where) as reader:
            yield reader

    def bounds(self, probe: bool = True) -> tuple[int, int]:
        """(first offset the broker still has, high watermark), from the partition leader.

        Without ``probe`` the high watermark is the highest one known (a lower bound)
        and only the first offset is asked. ListOffsets(latest) is the high watermark
        on Apache Kafka: an acknowledged (acks=all) append is below it, and a leader
        that does not know it yet answers OFFSET_NOT_AVAILABLE, which the client
        retries. An end below what this handle knew means the topic is shorter than
        it was (deleted and recreated under the handle): that end is believed, and
        the WAL's incarnation check names the loss.
        """
        with self._login_checked("reading the ends of"), self._reader() as c:
            if not probe:
                begin = c.begin()
                return begin, max(begin, self._known_high)
            begin, high = c.watermarks()
            if high < self._known_high:  # an append acked meanwhile, or a shorter topic:
                begin, high = c.watermarks()  # asked after the ack, the answer is exact
        high = max(begin, high)
        with self._lock:
            if high < self._known_high:
                log.warning(
                    "namespace=%s log=%s: topic %s ends at %d, below the %d this "
                    "handle knew: it was deleted and recreated",
                    self.where.get("namespace"),
                    self.where.get("log"),
                    self.topic,
                    high,
                    self._known_high,
                )
            self._known_high = high
            return begin, high

    def await_end(self, end: int, high: int) -> int:
        """Ask the high watermark again (with backoff) until it reaches ``end``, an end
        the caller knows was acknowledged; at most ``request_timeout_ms``."""
        settings = self.settings
        bound_s = settings.request_timeout_ms / 1000
        started = time.monotonic()
        backoff, asked = END_BACKOFF_S, 1
        while True:
            left = bound_s - (time.monotonic() - started)
            if left <= 0:
                raise BackendUnavailable(
                    f"the high watermark of topic {self.topic} stays at {high}, below the end "
                    f"{end} of acknowledged entries, after {asked} answers in "
                    f"{time.monotonic() - started:.1f}s (request_timeout_ms="
                    f"{settings.request_timeout_ms}; a partition leader that lags or moved; "
                    f"{broker_reachability(settings.bootstrap_servers)})",
                    **self.where,
                )
            time.sleep(min(backoff, left))  # retry backoff: the broker's view catches up
            backoff = min(backoff * 2, END_BACKOFF_MAX_S)
            high = self.bounds()[1]
            asked += 1
            if high >= end:
                log.info(
                    "namespace=%s log=%s: topic %s reached the acknowledged end %d after "
                    "%d answers (a high watermark that lagged)",
                    self.where.get("namespace"),
                    self.where.get("log"),
                    self.topic,
                    end,
                    asked,
                )
                return high

    # -- reading --------------------------------------------------------------

    def scan(self, start: int, stop: int) -> Iterator[Entry]:
        """Entries in [start, stop) of the topic, fetched in bounded chunks.

        Every offset below ``stop`` exists (below a high watermark, or acknowledged), so
        a fetch that ends early (librdkafka reports the end of the partition as its
        broker sees it) is asked again; only ``request_timeout_ms`` without an entry
        is an error.
        """
        if start >= stop:
            return
        settings = self.settings
        timeout_ms = settings.request_timeout_ms
        with self._login_checked("reading"), self._reader() as c:
            c.seek(start)
            offset = start
            deadline = time.monotonic() + timeout_ms / 1000
            while offset < stop:
                left_ms = int((deadline - time.monotonic()) * 1000)
                batch = c.fetch(min(stop - offset, SCAN_CHUNK), max(1, left_ms)) if left_ms > 0 else []
                if not batch:
                    if time.monotonic() < deadline:
                        continue  # the end of the partition as its broker saw it: again
                    raise BackendUnavailable(
                        f"Kafka broker {settings.bootstrap_servers} sent nothing for "
                        f"request_timeout_ms={timeout_ms} while reading topic {self.topic} at "
                        f"offset {offset} (expected entries up to {stop})",
                        **self.where,
                    )
                deadline = time.monotonic() + timeout_ms / 1000
                for entry in batch:
                    offset = entry.offset
                    if offset >= stop:
                        return
                    yield entry
                offset += 1

    def close(self) -> None:
        """No reader of the partition is borrowed after this; its idle ones are closed."""
        self._closed = True
        self.pool.drop(self.topic)
