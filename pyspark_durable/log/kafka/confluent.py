"""The Kafka log's librdkafka client (confluent-kafka): options, errors, sends, reads, topics.

:mod:`pyspark_durable.log.kafka` runs the same log protocol over either client; this
module is the confluent-kafka half, chosen with ``client=confluent``
(``pyspark_durable[kafka]``), the default client when installed: kafka-python
moves ~70-100 MB/s on this machine and librdkafka several times that, in C threads
that do not hold the GIL (:func:`~pyspark_durable.log.kafka.settings.resolve_client`).

Implementation notes (why):

* **Options.** Keys arrive normalized (``linger_ms``); a librdkafka property is the
  dotted name (``linger.ms``), and the kafka-python names whose librdkafka name
  differs are translated (:data:`ALIASES`). librdkafka itself validates names and
  values when a client is built; its refusal becomes :class:`ConfigError`.
* **The same safety settings** as kafka-python: acks=all and idempotence on the
  producer; no group offsets, ``auto.offset.reset=error`` and CRC checks on readers,
  which use ``assign()`` with an explicit offset (the group id is never joined).
* **The watermarks** are one ``get_watermark_offsets`` call (ListOffsets earliest
  and latest, from the partition's leader).
* **Deliveries** are served by one polling thread per producer; ``produce`` copies
  each value into librdkafka's buffers (the Python API has no zero-copy produce), so
  values are passed as they are when they are ``bytes`` and converted only otherwise.
* **Logs** of librdkafka go to the ``pyspark_durable.log.kafka.librdkafka`` logger
  (warning level and above, as debug lines; see :class:`_LibrdkafkaLog`), not to stderr.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from pyspark_durable.errors import (
    BackendUnavailable,
)
from pyspark_durable.log.base import Entry, Record
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.api import KafkaClient
from pyspark_durable.log.kafka.auth import rd_list_topics
from pyspark_durable.log.kafka.librdkafka import (
    READER_GROUP,
    RETRIABLE,
    RETRY_BACKOFF_S,
    TRANSIENT_FETCH,
    build,
    error_of,
    librdkafka_configs,
    rd_translated,
    typed,
)
from pyspark_durable.log.kafka.topics import OneTopicRule

log = logging.getLogger(__name__)


FETCH_SLICE_S = 0.05  # one consume() wait: short, so an end of log answers quickly
POLL_S = 0.05  # the delivery thread's poll interval
_AS_IS = (bytes, pa.Buffer)  # values produce() takes without a copy to bytes
WAIT_SLICE_S = 0.005  # a waiting caller's flush slice (see ConfluentSender.wait)
CREATE_POLL_S = 0.05

_SENDERS: dict[frozenset, ConfluentSender] = {}
_SENDERS_LOCK = threading.Lock()


def shared_sender(settings: Any, namespace: str) -> ConfluentSender:
    """The process's producer for these settings, shared by every store that uses them.

    An idempotent librdkafka producer can spend ~0.5 s acquiring its producer id before
    its first delivery (its retry timer), which a producer per store would make every
    reopen pay. Sharing is safe: librdkafka keeps the sequence numbers per partition.
    """
    key = frozenset(settings.clients["producer"].items())
    with _SENDERS_LOCK:
        sender = _SENDERS.get(key)
        if sender is None or sender.closed or sender.broken:
            if sender is not None and sender.broken:
                sender.discard()
            sender = _SENDERS[key] = ConfluentSender(settings, namespace)
        return sender


@atexit.register
def _flush_senders() -> None:
    with _SENDERS_LOCK:
        senders = list(_SENDERS.values())
    for sender in senders:
        sender.stop(5.0)


class ConfluentSender:
    """One idempotent producer and the thread that serves its delivery reports."""

    def __init__(self, settings: Any, namespace: str) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["producer"])
        self.producer = build(Producer, settings.clients["producer"], "connecting the producer",
                              self.address, namespace=namespace)
        self._stop = threading.Event()
        self._fatal_error: KafkaError | None = None  # a refused producer id: never used again
        self._login_refused = False  # the token endpoint refused it: never used again
        self._waiters = 0  # callers serving delivery reports themselves (see wait)
        self._turn = threading.Condition()
        self._thread = threading.Thread(target=self._serve, name="durablewal-rdkafka-deliveries",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        """Serve delivery reports while no caller is waiting for its own."""
        while not self._stop.is_set():
            with self._turn:
                while self._waiters and not self._stop.is_set():
                    self._turn.wait(POLL_S)
            with self._fatal_noted(raise_it=False):
                self.producer.poll(POLL_S)

    def wait(self, future: Future, timeout_s: float) -> bool:
        """Serve delivery reports in the waiting thread until ``future`` is done.

        Reports served by the delivery thread reach a waiter through a thread switch,
        and ``flush(0)`` alone does not stop librdkafka from lingering on what is
        produced meanwhile: together a quarter of a synchronous append's throughput
        against a raw producer's ``flush``. So a waiter flushes in short slices (while a
        flush runs librdkafka sends at once, and it serves reports in this thread), and
        the delivery thread pauses while anyone waits. Any thread's flush serves every
        pending report, so other threads' asynchronous appends still complete.
        """
        deadline = time.monotonic() + timeout_s
        with self._turn:
            self._waiters += 1
        try:
            while not future.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                with self._fatal_noted(raise_it=False):
                    self.producer.flush(min(WAIT_SLICE_S, left))
            return True
        finally:
            with self._turn:
                self._waiters -= 1
                self._turn.notify_all()

    def send(self, topic: str, records: Sequence[Record], acked: Callable[[int, int], None],
             failed: Callable[[BaseException], None], where: Mapping[str, Any]) -> None:
        produce = self.producer.produce

        def report(i: int) -> Callable[[Any, Any], None]:
            def delivered(err: KafkaError | None, msg: Any) -> None:
                if err is not None:
                    self._note(err)
                    # a fatal error purges the queue: the fatal error is the cause
                    cause = self._fatal_error or err
                    failed(typed(cause, "append", self.address, self.principal, **where))
                else:
                    acked(i, msg.offset())
            return delivered

        with rd_translated("append", self.address, self.principal, **where), self._fatal_noted():
            for i, r in enumerate(records):
                # bytes and Arrow buffers as they are (librdkafka copies them once)
                value = r.value if type(r.value) in _AS_IS or r.value is None \
                    else bytes(r.value)  # None: a tombstone (compacted topics)
                key = r.key if type(r.key) is bytes else bytes(r.key)
                headers = [(k, bytes(v)) for k, v in r.headers] or None
                while True:
                    try:
                        produce(topic, value, key, partition=0, headers=headers,
                                on_delivery=report(i))
                        break
                    except BufferError:  # the local queue is full: let deliveries drain
                        self.producer.poll(POLL_S)

    @contextmanager
    def _fatal_noted(self, raise_it: bool = True) -> Iterator[None]:
        """A fatal error marks the producer broken. librdkafka raises one from ``produce``,
        and from ``poll``/``flush`` too (the failed deliveries still come as reports,
        served by the next poll: there it is not raised)."""
        try:
            yield
        except KafkaException as exc:
            err = error_of(exc)
            if err is not None:
                self._note(err)
            if self._fatal_error is None:
                raise
            if raise_it:  # the cause, not librdkafka's "_FATAL: Unable to produce"
                raise KafkaException(self._fatal_error) from exc
            log.debug("Kafka producer of %s failed for good: %s", self.address, exc)

    def _note(self, err: KafkaError) -> None:
        if err.fatal() and self._fatal_error is None:
            self._fatal_error = err

    @property
    def broken(self) -> bool:
        """librdkafka's fatal errors (a refused idempotent producer id) end a producer
        for good: granting the right does not revive it, so a new one is made. So does a
        token request the endpoint refused: librdkafka asks again only 10 s later, and a
        new producer asks at once (once the secret is taken again, it logs in)."""
        return self._fatal_error is not None or self._login_refused

    def login_refused(self) -> None:
        self._login_refused = True

    def discard(self) -> None:
        """Stop serving a broken producer without waiting for it (it delivers nothing)."""
        self._stop.set()

    def hurry(self) -> None:
        """``flush(0)`` wakes the broker threads to send what lingers, without waiting."""
        self.producer.flush(0)

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def close(self, timeout_s: float) -> None:
        """A store is done with it: wait for what is in flight (it stays shared)."""
        with self._fatal_noted(raise_it=False):
            self.producer.flush(timeout_s)

    def stop(self, timeout_s: float) -> None:
        with self._fatal_noted(raise_it=False):
            self.producer.flush(timeout_s)
        self._stop.set()
        self._thread.join(timeout=timeout_s)


class ConfluentReader:
    """One consumer assigned to partition 0 of a topic, as a
    :class:`~pyspark_durable.log.kafka.api.Reader`."""

    def __init__(self, settings: Any, topic: str, where: Mapping[str, Any]) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["consumer"])
        self.topic = topic
        self.where = dict(where)
        self.timeout_s = settings.request_timeout_ms / 1000
        self.consumer = build(Consumer, settings.clients["consumer"], "connecting a consumer",
                              self.address, **where)
        self.tp = TopicPartition(topic, 0)
        self.group_refusals = 0

    def watermarks(self) -> tuple[int, int]:
        """Both ends, from the partition's leader (ListOffsets earliest and latest).

        A transient failure is retried within request_timeout_ms: when a killed leader's
        broker leaves the metadata, librdkafka fails the request in flight on it at once
        (_DESTROY_BROKER, _TRANSPORT) rather than sending it to the new leader.
        """
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                with rd_translated("reading watermarks", self.address, self.principal, **self.where):
                    # one attempt waits a slice: a request queued for a dead leader
                    # would wait out the whole timeout
                    left = deadline - time.monotonic()
                    return self.consumer.get_watermark_offsets(
                        self.tp, timeout=max(0.1, min(left, max(1.0, self.timeout_s / 10))))
            except BackendUnavailable:
                if time.monotonic() + RETRY_BACKOFF_S >= deadline:
                    raise
                time.sleep(RETRY_BACKOFF_S)  # the leader moves: ask again shortly

    def begin(self) -> int:
        return self.watermarks()[0]

    def seek(self, offset: int) -> None:
        with rd_translated("seeking", self.address, self.principal, **self.where):
            self.consumer.assign([TopicPartition(self.topic, 0, offset)])

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]:
        """Entries from the position on: the first that arrive, at most ``max_records``;
        an empty list at the end of the partition or when ``timeout_ms`` passed."""
        want = max(1, min(max_records or 10_000, 10_000))
        deadline = time.monotonic() + timeout_ms / 1000
        with rd_translated("fetching", self.address, self.principal, **self.where):
            while True:
                out: list[Entry] = []
                at_end = False
                for msg in self._take(want):
                    err = msg.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            at_end = True
                            continue
                        if err.code() in TRANSIENT_FETCH and time.monotonic() < deadline:
                            continue  # a leader change: librdkafka fetches from the new one
                        if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                            self._group_refused(err)
                            continue
                        raise typed(err, f"reading topic {self.topic}", self.address, self.principal,
                                    **self.where)
                    out.append(Entry(msg.offset(), msg.key() or b"", msg.value() or b"",
                                     tuple(msg.headers() or ()), msg.timestamp()[1]))
                if out or at_end or time.monotonic() >= deadline:
                    return out

    def _group_refused(self, err: KafkaError) -> None:
        """librdkafka looks up the coordinator of the consumer's ``group.id`` (it must
        have one, and never joins it); a broker that refuses the principal DESCRIBE on that
        group says so here. The reader never uses the group (assign/seek, no committed
        offsets), so the refusal is no error: logged once per reader."""
        self.group_refusals += 1
        if self.group_refusals == 1:
            log.debug("topic %s: the broker refused the coordinator lookup of group %s "
                      "(unused by this reader): %s", self.topic, READER_GROUP, err.str())

    def _take(self, want: int) -> list[Any]:
        """What the prefetch queue holds (at most ``want``), else the first message that
        comes within one slice and what arrived with it. ``consume(n, t)`` alone would
        wait all of ``t`` whenever fewer than ``n`` messages are queued."""
        got = self.consumer.consume(want, 0)
        if got:
            return got
        first = self.consumer.poll(FETCH_SLICE_S)
        if first is None:
            return []
        return [first, *self.consumer.consume(want - 1, 0)] if want > 1 else [first]

    def idle(self) -> None:
        """Stop fetching: an assigned librdkafka consumer fetches in the background, so an
        idle pooled one would keep asking the broker (every fetch.wait.max.ms)."""
        with rd_translated("releasing a consumer", self.address, self.principal, **self.where):
            self.consumer.unassign()

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing a Kafka consumer failed: %s", exc)


class ConfluentAdmin(OneTopicRule):
    """Topic administration with librdkafka's AdminClient, as a
    :class:`~pyspark_durable.log.kafka.api.TopicAdmin`."""

    def __init__(self, settings: Any, namespace: str | None = None) -> None:
        self.settings = settings
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["admin"])
        self.namespace = namespace
        self.timeout_s = settings.request_timeout_ms / 1000
        self.client = build(AdminClient, settings.clients["admin"], "connecting the admin client",
                            self.address, namespace=namespace)
        self._metadata()  # as kafka-python's admin does: an unreachable broker fails the open

    def _where(self, **more: Any) -> dict[str, Any]:
        return {"namespace": self.namespace, **more}

    def _doing(self, what: str, topic: str) -> Any:
        """:func:`rd_translated` for a request about ``topic``."""
        return rd_translated(what, self.address, self.principal, **self._where(topic=topic))

    def _metadata(self) -> Any:
        with rd_translated("listing topics", self.address, self.principal, **self._where()):
            try:
                return rd_list_topics(self.client, self.settings.connect_timeout_ms / 1000,
                                      self.address, self.settings.clients["admin"],
                                      **self._where())
            except KafkaException as exc:
                err = error_of(exc)
                if err is not None and err.code() in RETRIABLE:
                    raise BackendUnavailable(
                        f"cannot reach Kafka broker {self.address} within connect_timeout_ms="
                        f"{self.settings.connect_timeout_ms}: {err.str()}", **self._where()
                    ) from exc
                raise

    def list_topics(self) -> list[str]:
        return list(self._metadata().topics)

    def partitions(self, topic: str) -> int | None:
        info = self._metadata().topics.get(topic)
        if info is None:
            self._check_described(topic)
            return None
        if info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return None
        if info.error is not None:
            with self._doing("describing topic", topic):
                raise KafkaException(info.error)
        return len(info.partitions)

    def _check_described(self, topic: str) -> None:
        """A topic missing from the cluster's metadata is missing, or hidden: metadata of
        all topics leaves out those the principal may not DESCRIBE. Asked by name (never
        auto-created), a hidden one is refused: an AccessDenied, not a missing log."""
        with self._doing("describing topic", topic):
            (future,) = self.client.describe_topics(
                TopicCollection([topic]), request_timeout=self.timeout_s).values()
            try:
                future.result()
            except KafkaException as exc:
                err = error_of(exc)
                if err is None or err.code() != KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    return  # missing (or unknown to the broker asked): the caller's case
                raise

    def delete_topic(self, topic: str) -> None:
        with self._doing("deleting a topic", topic):
            for future in self.client.delete_topics([topic], request_timeout=self.timeout_s).values():
                try:
                    future.result()
                except KafkaException as exc:
                    err = error_of(exc)
                    if err is None or err.code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                        raise  # else another process replaced it first

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        spec = NewTopic(topic, num_partitions=1,
                        replication_factor=self.settings.replication_factor,
                        config={**configs, **self.settings.topic_config})
        with self._doing("creating topic", topic):
            for future in self.client.create_topics([spec], request_timeout=self.timeout_s).values():
                try:
                    future.result()
                except KafkaException as exc:
                    err = error_of(exc)
                    if err is None or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                        raise  # else another process won the race: verified below
        deadline = time.monotonic() + self.timeout_s
        while True:  # creation is asynchronous on the broker: wait until metadata has it
            count = self.partitions(topic)
            if count is not None or time.monotonic() > deadline:
                return count
            time.sleep(CREATE_POLL_S)

    def empty(self, topic: str, count: int) -> bool:
        consumer = build(Consumer, self.settings.clients["consumer"], "reading end offsets",
                         self.address, **self._where(topic=topic))
        try:
            with self._doing("reading end offsets", topic):
                return all(consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                          timeout=self.timeout_s)[1] == 0
                           for p in range(count))
        finally:
            consumer.close()

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        resource = ConfigResource(ResourceType.TOPIC, topic)
        with self._doing("describing topic configs", topic):
            (future,) = self.client.describe_configs(
                [resource], request_timeout=self.timeout_s).values()
            entries = future.result()
        return {n: entries[n].value if n in entries else None for n in names}

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        with self._doing("altering topic configs", topic):
            for future in self.client.incremental_alter_configs(
                    [resource], request_timeout=self.timeout_s).values():
                future.result()

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset``; False if the broker does not support it."""
        where = self._where(topic=topic)
        with rd_translated("DeleteRecords", self.address, self.principal, **where):
            try:
                futures = self.client.delete_records([TopicPartition(topic, 0, offset)],
                                                     request_timeout=self.timeout_s)
                for future in futures.values():
                    future.result()
                return True
            except KafkaException as exc:
                err = error_of(exc)
                if err is None or err.code() not in (KafkaError._TRANSPORT,
                                                     KafkaError.UNSUPPORTED_VERSION,
                                                     KafkaError._UNSUPPORTED_FEATURE):
                    raise
                # a Kafka-protocol service without DeleteRecords: unsupported if it answers
                self.partitions(topic)
                log.debug("DeleteRecords failed on a reachable broker: %s", exc)
                return False

    def close(self) -> None:
        """AdminClient has no close: its handle goes with the object."""


CLIENT = KafkaClient("confluent", configs=librdkafka_configs, reader=ConfluentReader,
                     sender=shared_sender, admin=ConfluentAdmin)
