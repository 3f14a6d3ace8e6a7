"""librdkafka's AdminClient as the store's
:class:`~pyspark_durable.log.kafka.api.TopicAdmin`: topics listed, described, created,
configured and cut (DeleteRecords), under the one-topic rule of
:class:`~pyspark_durable.log.kafka.topics.OneTopicRule`.

It is built when a store opens and asks for metadata at once, as kafka-python's admin
does, so an unreachable broker or a refused login fails the open
(:func:`~pyspark_durable.log.kafka.confluent.login.watched_metadata`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from pyspark_durable.errors import BackendUnavailable
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.confluent.errors import RETRIABLE, build, error_of, translated
from pyspark_durable.log.kafka.confluent.login import watched_metadata
from pyspark_durable.log.kafka.topics import OneTopicRule

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

CREATE_POLL_S = 0.05

class ConfluentAdmin(OneTopicRule):
    """Topic administration with librdkafka's AdminClient, as a
    :class:`~pyspark_durable.log.kafka.api.TopicAdmin`."""

    def __init__(self, settings: KafkaSettings, namespace: str | None = None) -> None:
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
        """:func:`translated` for a request about ``topic``."""
        return translated(what, self.address, self.principal, **self._where(topic=topic))

    def _metadata(self) -> Any:
        with translated("listing topics", self.address, self.principal, **self._where()):
            try:
                return watched_metadata(self.client, self.settings.connect_timeout_ms / 1000,
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
        with translated("DeleteRecords", self.address, self.principal, **where):
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
