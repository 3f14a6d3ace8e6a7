"""The Kafka log: the distributed backend (any Kafka-protocol broker), on either client.

The protocol below is written once against two small interfaces, :class:`Reader`
(a consumer of partition 0 of one topic) and :class:`Sender` (a producer), with one
implementation per client: kafka-python in :mod:`pyspark_durable.log.kafka_python`
and confluent-kafka / librdkafka in :mod:`pyspark_durable.log.kafka_confluent`,
each imported only when chosen
(option ``client``: ``confluent``, the default when installed, or ``kafka-python``,
the pure-Python fallback; see :func:`~pyspark_durable.log.kafka_settings.resolve_client`).
Both run the same contract, WAL and crash tests.

Mapping (one namespace)::

    {namespace}_{log}          one topic per log, exactly ONE partition: region logs
                               are {namespace}_region_{id}, the WAL's own log
                               {namespace}_commits
    {namespace}_snapshots      the namespace's small state, compacted, keyed by
                               "snapshot/{name}/{version:020d}"  snapshot versions
                                                  (an empty value: deleted)
                               "log/{name}"       registry of the namespace's logs
                               "lowwater/{name}"  logical low watermark of a log

Options and their spelling (``kafka.bootstrap.servers`` = ``bootstrap_servers``):
see :mod:`pyspark_durable.log.kafka_settings`.

Implementation notes (why):

* **Explicit topics.** A produce or metadata request for an unknown topic may
  auto-create it (``auto.create.topics.enable``, on by default) with the broker's
  ``num.partitions`` and its 7-day retention. Topics are created with the admin
  client before the first append, with infinite retention; an existing topic is
  verified to have one partition and, opened for writing, no broker-side retention
  (:meth:`~pyspark_durable.log.kafka_admin.OneTopicRule.ensure`).
  A log name may not be ``snapshots`` or end in ``_snapshots``, so a topic ending in
  ``_snapshots`` is always the snapshots topic of exactly one namespace: that is
  how :meth:`KafkaLogStore.list_namespaces` finds namespaces, and the registry is
  how :meth:`KafkaLogStore.list_logs` tells namespace ``a``'s log ``b_commits`` from
  namespace ``a_b``'s ``commits``. Those two still share one topic: do not use
  namespaces whose name is another namespace's name plus ``_`` plus a log prefix.
* **assign()/seek(), never consumer groups.** A reader wants exact offsets, no
  group join (slow) and no committed group offsets; ``auto_offset_reset='none'``
  makes a missing offset an error instead of a silent jump.
* **The high watermark is ListOffsets(latest)**, exact on Apache Kafka (see
  :meth:`KafkaLog._bounds`); a read of a range below a known end asks nothing.
* **An acknowledged range is read to its end** (:meth:`KafkaLog.read_acknowledged`,
  a committed step's run): right after another process's acknowledgement, a leader
  change or a broker whose high watermark has not advanced yet can answer a shorter
  end, or a fetch can stop early. The end is asked again with backoff within
  ``request_timeout_ms``; a view that stays short is :class:`BackendUnavailable`
  naming both ends, never a short read (which the WAL would call corrupt).
* **Durable appends.** acks=all and idempotence are forced; an append returns when
  every record is acknowledged, else raises (the records that did land stay in
  the log, as after any crash: the WAL's step commits decide what is visible).
* **Deletion.** ``delete_before`` first writes the logical low watermark to the
  snapshots topic (acks=all), then calls DeleteRecords, so a crash between the two
  still hides the entries. Kafka-protocol services without DeleteRecords are
  detected once per store and logged once; reads then rely on the logical
  watermark, which every process reads before a read.
* **Snapshots** are found by scanning the (compacted) snapshots topic from the last
  position this store has seen: fine for small, rare snapshots. A deleted version
  is a tombstone (a null value), so compaction removes it and then the tombstone.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyspark_durable.errors import BackendUnavailable
from pyspark_durable.log.base import (
    Entry,
    Log,
    Record,
)
from pyspark_durable.log.kafka_admin import Reader, broker_reachability

if TYPE_CHECKING:
    from pyspark_durable.log.kafka_store import KafkaLogStore

log = logging.getLogger(__name__)

SNAPSHOTS = "snapshots"
SCAN_CHUNK = 10_000  # entries asked of one fetch call
# an acknowledged range's end not seen yet: ask again after this long, doubling up to
# the cap (a lagging high watermark catches up within a replica fetch, milliseconds)
END_BACKOFF_S = 0.01
END_BACKOFF_MAX_S = 0.5
# the producers batch up to 16 MiB (kafka_confluent.TUNED, kafka_python.TUNED): a topic
# keeps Kafka's 1 MiB max.message.bytes otherwise and refuses such batches
MAX_MESSAGE_BYTES = str((16 << 20) + (64 << 10))
LOG_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete",
                    "max.message.bytes": MAX_MESSAGE_BYTES}
# compacted within the hour (a snapshot per cleaner pass must not pile up in the active
# segment for the broker's default 7 days: every open reads the topic)
SNAPSHOTS_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "compact",
                          "max.message.bytes": MAX_MESSAGE_BYTES, "segment.ms": "3600000"}


class KafkaLog(Log):
    """One log = one single-partition topic; see the module docstring."""

    def __init__(self, store: KafkaLogStore, name: str, topic: str) -> None:
        super().__init__(store.namespace, name)
        self.store = store
        self.topic = topic
        self._known_high = 0  # highest high watermark seen (appends and fetches)
        self._idle: list[Reader] = []
        self._lock = threading.Lock()
        self._closed = False

    def _where(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "log": self.name}

    # -- appending ------------------------------------------------------------

    def append(self, records: Sequence[Record]) -> list[int]:
        fut = self.append_async(records)
        if not fut.done():
            sender = self.store.sender()
            sender.hurry()  # the caller waits: do not linger
            wait_s = self.store.settings.wait_s
            if not sender.wait(fut, wait_s):
                raise BackendUnavailable(
                    f"append to topic {self.topic} on Kafka broker "
                    f"{self.store.settings.bootstrap_servers} was not acknowledged within "
                    f"{wait_s:.0f}s (the records may or may not be stored; "
                    f"{broker_reachability(self.store.settings.bootstrap_servers)})",
                    **self._where())
        return fut.result()

    def append_async(self, records: Sequence[Record]) -> Future[list[int]]:
        """Send every record now; the future resolves when all are acknowledged.

        The producer batches records of many calls into shared requests, so a writer
        that does not wait between entries keeps the broker busy (linger_ms, batch_size).
        """
        out: Future[list[int]] = Future()
        if not records:
            out.set_result([])
            return out
        sender = self.store.sender()
        address = self.store.settings.bootstrap_servers
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
                out.set_exception(BackendUnavailable(
                    f"append to topic {self.topic} on Kafka broker {address} failed: {done} "
                    f"of {len(records)} records acknowledged (the rest may or may not be "
                    f"stored): {type(exc).__name__}: {exc}", **self._where()))

        sender.send(self.topic, records, acked, failed, self._where())
        return out

    # -- consumers and bounds -----------------------------------------------------

    @contextmanager
    def _consumer(self) -> Iterator[Reader]:
        """Borrow a reader of the partition; pooled, closed on error."""
        with self._lock:
            if self._closed:
                raise BackendUnavailable("log is closed", **self._where())
            consumer = self._idle.pop() if self._idle else None
        if consumer is None:
            consumer = self.store.new_reader(self.topic, self._where())
        ok = False
        try:
            yield consumer
            ok = True
        except GeneratorExit:  # a reader stopped early: the consumer is fine
            ok = True
            raise
        finally:
            if ok:
                consumer.idle()
            with self._lock:
                keep = ok and not self._closed
                if keep:
                    self._idle.append(consumer)
            if not keep:
                consumer.close()
            else:
                self.store.parked(self, consumer)

    def evict(self, consumer: Reader) -> bool:
        """Close ``consumer`` if it is still idle here (the store's pool is full)."""
        with self._lock:
            if not any(c is consumer for c in self._idle):
                return False  # borrowed again meanwhile: the store forgets it
            self._idle = [c for c in self._idle if c is not consumer]
        consumer.close()
        return True

    def _bounds(self, probe: bool = True) -> tuple[int, int]:
        """(first offset the broker still has, high watermark), from the partition leader.

        Without ``probe`` the high watermark is the highest one known (a lower bound)
        and only the first offset is asked. ListOffsets(latest) is the high watermark
        on Apache Kafka: an acknowledged (acks=all) append is below it, and a leader
        that does not know it yet answers OFFSET_NOT_AVAILABLE, which the client
        retries. An end below what this handle knew means the topic is shorter than
        it was (deleted and recreated under the handle): that end is believed, and
        the WAL's incarnation check names the loss.
        """
        with self._consumer() as c:
            if not probe:
                begin = c.begin()
                return begin, max(begin, self._known_high)
            begin, high = c.watermarks()
            if high < self._known_high:  # an append acked meanwhile, or a shorter topic:
                begin, high = c.watermarks()  # asked after the ack, the answer is exact
        high = max(begin, high)
        with self._lock:
            if high < self._known_high:
                log.warning("namespace=%s log=%s: topic %s ends at %d, below the %d this "
                            "handle knew: it was deleted and recreated", self.namespace,
                            self.name, self.topic, high, self._known_high)
            self._known_high = high
            return begin, high

    def _watermarks(self, probe: bool = True) -> tuple[int, int]:
        begin, high = self._bounds(probe)
        logical = self.store.logical_low(self.name)
        return min(max(begin, logical), high), high

    def low_watermark(self) -> int:
        return self._watermarks()[0]

    def high_watermark(self) -> int:
        return self._watermarks()[1]

    # -- reading --------------------------------------------------------------

    def read(self, start: int, end: int | None = None) -> Iterator[Entry]:
        # a range below a known high watermark needs no probe for the end (saves a fetch)
        known = end is not None and start <= end <= self._known_high
        low, high = self._watermarks(probe=not known)
        self.check_range(start, low, high)
        stop = high if end is None else min(end, high)
        return self._scan(start, stop)

    def read_acknowledged(self, start: int, end: int) -> Iterator[Entry]:
        """Entries of ``[start, end)``, acknowledged (acks=all) by this or another process:
        read to ``end`` whatever this handle's view of the high watermark says (see the
        module docstring); :class:`BackendUnavailable` if the broker's end stays short."""
        known = start <= end <= self._known_high
        low, high = self._watermarks(probe=not known)
        if start < low:
            self.check_range(start, low, high)  # deleted: OffsetOutOfRange at once
        if high < end:
            high = self._await_end(end, high)
        self.check_range(start, low, high)
        return self._scan(start, end)

    def _await_end(self, end: int, high: int) -> int:
        """Ask the high watermark again (with backoff) until it reaches ``end``, an end
        the caller knows was acknowledged; at most ``request_timeout_ms``."""
        settings = self.store.settings
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
                    f"{broker_reachability(settings.bootstrap_servers)})", **self._where())
            time.sleep(min(backoff, left))  # retry backoff: the broker's view catches up
            backoff = min(backoff * 2, END_BACKOFF_MAX_S)
            high = self._bounds()[1]
            asked += 1
            if high >= end:
                log.info("namespace=%s log=%s: topic %s reached the acknowledged end %d after "
                         "%d answers (a high watermark that lagged)", self.namespace,
                         self.name, self.topic, end, asked)
                return high

    def _scan(self, start: int, stop: int) -> Iterator[Entry]:
        """Entries in [start, stop) of the topic, fetched in bounded chunks.

        Every offset below ``stop`` exists (below a high watermark, or acknowledged), so
        a fetch that ends early (librdkafka reports the end of the partition as its
        broker sees it) is asked again; only ``request_timeout_ms`` without an entry
        is an error.
        """
        if start >= stop:
            return
        settings = self.store.settings
        timeout_ms = settings.request_timeout_ms
        with self._consumer() as c:
            c.seek(start)
            offset = start
            deadline = time.monotonic() + timeout_ms / 1000
            while offset < stop:
                left_ms = int((deadline - time.monotonic()) * 1000)
                batch = c.fetch(min(stop - offset, SCAN_CHUNK), max(1, left_ms)) \
                    if left_ms > 0 else []
                if not batch:
                    if time.monotonic() < deadline:
                        continue  # the end of the partition as its broker saw it: again
                    raise BackendUnavailable(
                        f"Kafka broker {settings.bootstrap_servers} sent nothing for "
                        f"request_timeout_ms={timeout_ms} while reading topic {self.topic} at "
                        f"offset {offset} (expected entries up to {stop})", **self._where())
                deadline = time.monotonic() + timeout_ms / 1000
                for entry in batch:
                    offset = entry.offset
                    if offset >= stop:
                        return
                    yield entry
                offset += 1

    # -- deleting and closing ---------------------------------------------------

    def delete_before(self, offset: int) -> None:
        low, high = self._watermarks()
        target = min(offset, high)
        if target <= low:
            return
        self.store.set_logical_low(self.name, target)
        self.store.delete_records(self.topic, target)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for consumer in idle:
            consumer.close()
