"""kafka-python's KafkaProducer as the store's :class:`~pyspark_durable.log.kafka.api.Sender`.

kafka-python's own I/O thread completes each send's future, so the sender serves
nothing; what it does is replace a producer kafka-python left unusable
(:class:`KafkaPythonSender`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as futures_wait
from typing import TYPE_CHECKING, Any

import kafka.errors as kerr
from kafka import KafkaProducer

from pyspark_durable.log.base import Record
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.kafka_python.config import close_quietly, no_auto_create
from pyspark_durable.log.kafka.kafka_python.errors import as_typed, refusal_of, translated

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

class KafkaPythonSender:
    """kafka-python's KafkaProducer as a :class:`Sender`.

    A producer whose batch expired, or whose send was refused by the authorizer, is
    replaced before the next send. A batch that expired: kafka-python
    3.0.12 drops the producer id of an idempotent producer when a batch it had already
    sent expires (``reset_producer_id``) but never asks for a new one
    (``init_producer_id`` acts only in state UNINITIALIZED), so every later send of that
    producer waited forever, long after the brokers were back.
    """

    def __init__(self, settings: KafkaSettings, namespace: str) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["producer"])
        self.settings = settings  # (the namespace comes with each send: see _build)
        self._lock = threading.Lock()
        self._renew = False
        self.producer: KafkaProducer | None = None  # made by the first send

    def _build(self, where: Mapping[str, Any]) -> KafkaProducer:
        """A new producer, made by a send: its error names the send's namespace and log."""
        with translated("connecting the producer", self.address, self.principal, **where):
            return no_auto_create(KafkaProducer(**self.settings.clients["producer"]))

    def _current(self, where: Mapping[str, Any]) -> KafkaProducer:
        with self._lock:
            if self.producer is None or self._renew:
                old, self.producer = self.producer, self._build(where)
                self._renew = False
                if old is not None:
                    close_quietly(old, timeout=0)
            return self.producer

    def send(self, topic: str, records: Sequence[Record], acked: Callable[[int, int], None],
             failed: Callable[[BaseException], None], where: Mapping[str, Any]) -> None:
        def on_error(exc: BaseException) -> None:
            # expired (see the class docstring), or refused: a refused producer id leaves
            # the producer in a fatal state, which a right granted later does not lift
            if isinstance(exc, kerr.KafkaTimeoutError) or refusal_of(exc) is not None:
                self._renew = True
            failed(as_typed(exc, "append", self.address, self.principal, **where))

        producer = self._current(where)
        with translated("append", self.address, self.principal, **where):
            send = producer.send
            for i, r in enumerate(records):
                value = r.value if type(r.value) is bytes or r.value is None \
                    else bytes(r.value)  # None: a tombstone (compacted topics)
                fut = send(topic, value=value,
                           key=r.key if type(r.key) is bytes else bytes(r.key),
                           headers=[(k, bytes(v)) for k, v in r.headers] or None, partition=0)
                fut.add_callback(lambda meta, i=i: acked(i, meta.offset))
                fut.add_errback(on_error)

    @property
    def broken(self) -> bool:
        """Never: a producer left unusable is replaced here, before the next send."""
        return False

    def login_refused(self) -> None:
        """Nothing: kafka-python asks its token provider, which asks the endpoint, at
        every login."""

    def hurry(self) -> None:
        """kafka-python has no way to cut linger.ms short without waiting: nothing."""

    def wait(self, future: Future, timeout_s: float) -> bool:
        """kafka-python's own I/O thread completes the future."""
        return futures_wait([future], timeout=timeout_s).not_done == set()

    def close(self, timeout_s: float) -> None:
        with self._lock:
            producer = self.producer
        if producer is not None:
            close_quietly(producer, timeout=timeout_s)
