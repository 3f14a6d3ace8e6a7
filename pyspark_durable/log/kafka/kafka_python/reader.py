"""kafka-python's KafkaConsumer as a :class:`~pyspark_durable.log.kafka.api.Reader` of
partition 0 of one topic: ``assign()`` and ``seek()``, never a group.

kafka-python fetches only inside ``poll()``, so an idle reader has nothing to stop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka import KafkaConsumer, TopicPartition

from pyspark_durable.log.base import Entry
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.kafka_python.config import close_quietly, no_auto_create
from pyspark_durable.log.kafka.kafka_python.errors import translated

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

class KafkaPythonReader:
    """kafka-python's KafkaConsumer as a :class:`Reader`."""

    def __init__(self, settings: KafkaSettings, topic: str, where: Mapping[str, Any]) -> None:
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["consumer"])
        self.timeout_ms = settings.request_timeout_ms
        self.where = dict(where)
        self.tp = TopicPartition(topic, 0)
        with translated("connecting a consumer", self.address, self.principal, **where):
            self.consumer = no_auto_create(KafkaConsumer(**settings.clients["consumer"]))
            self.consumer.assign([self.tp])

    def begin(self) -> int:
        with translated("reading watermarks", self.address, self.principal, **self.where):
            return self.consumer.beginning_offsets([self.tp], self.timeout_ms)[self.tp]

    def watermarks(self) -> tuple[int, int]:
        with translated("reading watermarks", self.address, self.principal, **self.where):
            begin = self.consumer.beginning_offsets([self.tp], self.timeout_ms)[self.tp]
            return begin, self.consumer.end_offsets([self.tp], self.timeout_ms)[self.tp]

    def seek(self, offset: int) -> None:
        self.consumer.seek(self.tp, offset)

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]:
        with translated("fetching", self.address, self.principal, **self.where):
            got = self.consumer.poll(timeout_ms=timeout_ms, max_records=max_records)
        return [Entry(r.offset, r.key or b"", r.value or b"",
                      tuple(r.headers) if r.headers else (), r.timestamp)
                for r in got.get(self.tp, ())]

    def idle(self) -> None:
        """kafka-python fetches only inside poll(): nothing to stop."""

    def close(self) -> None:
        close_quietly(self.consumer)
