"""kafka-python's KafkaAdminClient as the store's
:class:`~pyspark_durable.log.kafka.api.TopicAdmin`: topics listed, described, created,
configured and cut (DeleteRecords), under the one-topic rule of
:class:`~pyspark_durable.log.kafka.topics.OneTopicRule`; never relying on
auto-creation.

Before the admin client is built, one connection checks the credentials
(:func:`~pyspark_durable.log.kafka.kafka_python.login.check_credentials`), so a refused
login fails the open at once rather than after the bootstrap's timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import kafka.errors as kerr
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType

from pyspark_durable.errors import BackendUnavailable, ConfigError
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.kafka_python.config import no_auto_create
from pyspark_durable.log.kafka.kafka_python.errors import translated
from pyspark_durable.log.kafka.kafka_python.login import check_credentials
from pyspark_durable.log.kafka.topics import OneTopicRule

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

T = TypeVar("T")


class KafkaPythonAdmin(OneTopicRule):
    """Creates, describes and lists topics with kafka-python; never relies on auto-creation."""

    def __init__(self, settings: KafkaSettings, namespace: str | None = None) -> None:
        self.settings = settings
        self.address = settings.bootstrap_servers
        self.principal = principal_of(settings.clients["admin"])
        self.namespace = namespace
        with translated("connecting the admin client", self.address, self.principal, namespace=namespace):
            check_credentials(settings.clients["admin"], self.address,
                              settings.connect_timeout_ms, namespace=namespace)
            try:
                self.client = KafkaAdminClient(**settings.clients["admin"])
            except kerr.KafkaTimeoutError as exc:
                raise BackendUnavailable(
                    f"cannot reach Kafka broker {self.address} within "
                    f"connect_timeout_ms={settings.connect_timeout_ms}: {exc}",
                    namespace=namespace,
                ) from exc

    def _doing(self, what: str, topic: str) -> Any:
        """:func:`translated` for a request about ``topic``."""
        return translated(what, self.address, self.principal, namespace=self.namespace,
                          topic=topic)

    def _past_backoff(self, call: Callable[[], T]) -> T:
        """``call()``, asked again while kafka-python refuses it with NodeNotReadyError.

        kafka-python fails a request at once, without sending it, while every node is in
        its reconnect backoff (after connections were reset, up to
        ``reconnect_backoff_max_ms``): a request right after the link healed would fail
        for the client's own pause. Waiting out one backoff keeps a dead link's failure
        within its bound and lets a healed link answer.
        """
        backoff_s = float(self.settings.clients["admin"]["reconnect_backoff_max_ms"]) / 1000  # TUNED
        deadline = time.monotonic() + backoff_s + 0.2
        while True:
            try:
                return call()
            except kerr.NodeNotReadyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.05)

    def list_topics(self) -> list[str]:
        with translated("listing topics", self.address, self.principal, namespace=self.namespace):
            return list(self._past_backoff(self.client.list_topics))

    def partitions(self, topic: str) -> int | None:
        """Number of partitions of ``topic``, None if it does not exist."""
        with self._doing("describing topic", topic):
            (info,) = self._past_backoff(lambda: self.client.describe_topics([topic]))
        if info.get("error_code", 0) == kerr.UnknownTopicOrPartitionError.errno:
            return None
        if info.get("error_code", 0):
            err = kerr.for_code(info["error_code"])
            with self._doing("describing topic", topic):
                raise err(f"describe_topics({topic})")
        return len(info.get("partitions") or [])

    def delete_topic(self, topic: str) -> None:
        with self._doing("replacing an auto-created topic", topic):
            try:
                self.client.delete_topics([topic])
            except kerr.UnknownTopicOrPartitionError:
                pass  # another process replaced it first

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        spec = {"num_partitions": 1, "replication_factor": self.settings.replication_factor,
                "configs": {**configs, **self.settings.topic_config}}
        with self._doing("creating topic", topic):
            try:
                self._past_backoff(lambda: self.client.create_topics({topic: spec}))
            except kerr.TopicAlreadyExistsError:
                pass  # another process won the race: verified by the caller
            self.client.wait_for_topics([topic], timeout_ms=self.settings.request_timeout_ms)
        # the broker that answers a describe may learn of a new topic a moment after the
        # controller created it (right after a broker restart, seconds): ask again within
        # the request timeout rather than take the topic for missing
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        count = self.partitions(topic)
        while count is None and time.monotonic() < deadline:
            time.sleep(0.2)
            count = self.partitions(topic)
        return count

    def empty(self, topic: str, count: int) -> bool:
        """Do all ``count`` partitions of ``topic`` hold nothing (end offsets 0)?"""
        with self._doing("reading end offsets", topic):
            consumer = no_auto_create(KafkaConsumer(**self.settings.clients["consumer"]))
            try:
                parts = [TopicPartition(topic, p) for p in range(count)]
                ends = consumer.end_offsets(parts, self.settings.request_timeout_ms)
                return all(ends[p] == 0 for p in parts)
            finally:
                consumer.close()

    def _config_request(self, request: Any) -> Any:
        """Send a DescribeConfigs or IncrementalAlterConfigs request and return its answer.

        kafka-python 3.0.12's ``describe_configs`` drops a resource's error code (a
        refused DESCRIBE_CONFIGS read as a topic without configs, "retention.ms=None"),
        and ``alter_configs`` returns a refusal as text: both are sent here instead, so
        a refusal is the broker's error.
        """
        manager = getattr(self.client, "_manager", None)
        if manager is None:
            raise ConfigError("kafka-python changed: cannot send a topic configs request; "
                              "use client=confluent")

        async def send() -> Any:
            return await manager.send(request)

        return self._past_backoff(lambda: manager.run(send))

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict.fromkeys(names))
        with self._doing("describing topic configs", topic):
            response = self._config_request(self.client._describe_configs_request([resource]))
            for result in response.results:
                if result.error_code:
                    raise kerr.for_code(result.error_code)(result.error_message)
            entries = self.client._describe_configs_process_responses([response], "all")
        entries = entries.get("topic", {}).get(topic, {})
        return {n: entries[n]["value"] if n in entries else None for n in names}

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=dict(configs))
        with self._doing("altering topic configs", topic):
            response = self._config_request(
                self.client._alter_configs_request([resource], incremental=True))
            for result in response.responses:
                if result.error_code:
                    raise kerr.for_code(result.error_code)(result.error_message)

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset``; False if the broker does not support it."""
        tp = TopicPartition(topic, 0)
        with self._doing("DeleteRecords", topic):
            try:
                self.client.delete_records({tp: offset},
                                           timeout_ms=self.settings.request_timeout_ms)
                return True
            except (kerr.KafkaConnectionError, kerr.UnsupportedVersionError,
                    kerr.KafkaProtocolError) as exc:
                # a Kafka-protocol service without DeleteRecords: unsupported if it answers
                self.partitions(topic)
                log.debug("DeleteRecords failed on a reachable broker: %s", exc)
                return False

    def close(self) -> None:
        try:
            self.client.close()
        except Exception as exc:  # noqa: BLE001 - closing must not mask the real error
            log.debug("closing the Kafka admin client failed: %s", exc)


