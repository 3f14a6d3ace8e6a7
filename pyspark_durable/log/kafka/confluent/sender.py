"""librdkafka's producer as the store's :class:`~pyspark_durable.log.kafka.api.Sender`:
one idempotent producer per process and settings, and the thread that serves its
delivery reports.

``produce`` copies each value into librdkafka's buffers (the Python API has no
zero-copy produce), so values are passed as they are when they are ``bytes`` or Arrow
buffers and converted only otherwise. A producer that librdkafka ended for good (a
fatal error) or whose token the endpoint refused is replaced, not reused.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from confluent_kafka import KafkaError, KafkaException, Producer

from pyspark_durable.log.base import Record
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.confluent.errors import build, error_of, translated, typed

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

POLL_S = 0.05  # the delivery thread's poll interval
_AS_IS = (bytes, pa.Buffer)  # values produce() takes without a copy to bytes
WAIT_SLICE_S = 0.005  # a waiting caller's flush slice (see ConfluentSender.wait)

_SENDERS: dict[frozenset, ConfluentSender] = {}
_SENDERS_LOCK = threading.Lock()


def shared_sender(settings: KafkaSettings, namespace: str) -> ConfluentSender:
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

    def __init__(self, settings: KafkaSettings, namespace: str) -> None:
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

        with translated("append", self.address, self.principal, **where), self._fatal_noted():
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
