"""The rule of the log's topics: one partition, and no broker-side retention.

:class:`OneTopicRule` gives every client's admin ``ensure`` and ``retention_problems``
over that client's topic primitives; the topic configs below are what the store creates
its topics with. A log name may not be ``snapshots`` or end in ``_snapshots``, so a topic
ending in ``_snapshots`` is always the snapshots topic of exactly one namespace.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Protocol

from pyspark_durable.errors import ConfigError, LogNotFound

log = logging.getLogger(__name__)
AUTO_CREATED_RETRIES = 3
# a topic's configs, asked right after it was created, until request_timeout_ms: a
# cluster's other brokers learn of the topic later (seconds on a loaded machine)
CONFIGS_RETRY_S = 0.05
CONFIGS_RETRY_MAX_S = 0.5

SNAPSHOTS = "snapshots"  # the log name of a namespace's snapshots topic
# the producers batch up to 16 MiB (confluent's and kafka_python's TUNED): a topic keeps
# Kafka's 1 MiB max.message.bytes otherwise and refuses such batches
MAX_MESSAGE_BYTES = str((16 << 20) + (64 << 10))
LOG_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "delete",
                    "max.message.bytes": MAX_MESSAGE_BYTES}
# compacted within the hour (a snapshot per cleaner pass must not pile up in the active
# segment for the broker's default 7 days: every open reads the topic)
SNAPSHOTS_TOPIC_CONFIG = {"retention.ms": "-1", "retention.bytes": "-1", "cleanup.policy": "compact",
                          "max.message.bytes": MAX_MESSAGE_BYTES, "segment.ms": "3600000"}

# broker-side settings that delete records by themselves, and what the WAL needs of each
RETENTION_KEYS = ("retention.ms", "retention.bytes", "cleanup.policy")


def deleting_settings(actual: Mapping[str, str | None], compacted: bool) -> list[str]:
    """The settings of a topic under which the broker deletes records on its own.

    The rule: nothing but the WAL's own ``delete_before`` (DeleteRecords, below what
    every acknowledged step needs) may remove a record. So a topic whose cleanup.policy
    includes ``delete`` must have ``retention.ms=-1`` and ``retention.bytes=-1``; a log
    topic must not be compacted (compaction keeps the last record per key, and a
    retried attempt writes the same keys again); the snapshots topic is compacted
    (``compacted``), which keeps the newest value of every key, all it reads.
    """
    policy = {p.strip() for p in str(actual.get("cleanup.policy") or "delete").split(",")}
    found = []
    if "delete" in policy:
        found += [f"{key}={actual.get(key)}" for key in ("retention.ms", "retention.bytes")
                  if str(actual.get(key)) != "-1"]
    if "compact" in policy and not compacted:
        found.append(f"cleanup.policy={actual.get('cleanup.policy')}")
    return found


class _Timeouts(Protocol):
    """What the topic rule reads of the client's settings (``KafkaSettings`` has it; the
    settings import this module, so the rule names only what it needs)."""

    request_timeout_ms: int


class OneTopicRule:
    """``ensure``, the rule of the log's topics, over any client's topic primitives."""

    namespace: str | None
    address: str
    settings: _Timeouts

    def partitions(self, topic: str) -> int | None:
        raise NotImplementedError

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        raise NotImplementedError

    def delete_topic(self, topic: str) -> None:
        raise NotImplementedError

    def empty(self, topic: str, count: int) -> bool:
        raise NotImplementedError

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        """The topic's effective values of ``names`` (its own or the broker's defaults)."""
        raise NotImplementedError

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Set these topic configs (IncrementalAlterConfigs), leaving the others."""
        raise NotImplementedError

    def retention_problems(self, topic: str, compacted: bool) -> list[str]:
        """:func:`deleting_settings` of ``topic`` as the broker reports them."""
        return deleting_settings(self.topic_configs(topic, RETENTION_KEYS), compacted)

    def ensure(self, topic: str, create: bool, configs: Mapping[str, str]) -> bool:
        """Make sure ``topic`` exists with ONE partition; False if missing and not ``create``.

        A topic a broker auto-created with other partition counts (a client that still
        knew a deleted topic asked for it) is replaced when it is empty and ``create``
        is asked: nothing is lost. A non-empty one is an error, never used.

        Opened for writing (``create``), a topic whose broker-side retention could
        delete records (:func:`deleting_settings`: a topic auto-created or made by hand
        with Kafka's 7-day default, or one an operator changed) gets the WAL's settings
        when it is empty, with a warning, and is a :class:`ConfigError` naming the
        settings and the fix when it holds records. Readers are not refused (they
        read what is there); ``durablewal check`` reports the same problems.
        """
        count = self.partitions(topic)
        for _ in range(AUTO_CREATED_RETRIES):
            if count in (None, 1) or not create or not self.empty(topic, count):
                break
            log.warning("namespace=%s: topic %s was auto-created with %d partitions and is "
                        "empty; replacing it with a 1-partition topic", self.namespace, topic,
                        count)
            self.delete_topic(topic)
            count = self.create(topic, configs)
        if count is None:
            if not create:
                return False
            count = self.create(topic, configs)
        if count != 1:
            raise ConfigError(
                f"topic {topic!r} has {count} partitions; a log needs exactly 1 (created by "
                "auto-creation or by hand?): delete it or use another namespace",
                namespace=self.namespace,
            )
        if create:
            self._ensure_retention(topic, configs)
        return True

    def _ensure_retention(self, topic: str, configs: Mapping[str, str]) -> None:
        compacted = "compact" in configs.get("cleanup.policy", "")
        wanted = {"retention.ms": "-1", "retention.bytes": "-1",
                  "cleanup.policy": "compact" if compacted else "delete"}
        deadline = time.monotonic() + self.settings.request_timeout_ms / 1000
        backoff = CONFIGS_RETRY_S
        while True:
            try:
                problems = self.retention_problems(topic, compacted)
                break
            except LogNotFound:  # just created: not on every broker yet (3-node clusters)
                if time.monotonic() + backoff > deadline:
                    raise
                time.sleep(backoff)
                backoff = min(backoff * 2, CONFIGS_RETRY_MAX_S)
        if not problems:
            return
        if self.empty(topic, 1):
            log.warning("namespace=%s: topic %s on %s is empty and has %s (broker-side "
                        "retention would delete WAL records): setting the WAL's %s",
                        self.namespace, topic, self.address, ", ".join(problems),
                        ", ".join(f"{k}={v}" for k, v in wanted.items()))
            self.set_topic_configs(topic, {**configs, **wanted})
            problems = self.retention_problems(topic, compacted)
            if not problems:
                return
        raise ConfigError(
            f"topic {topic!r} on {self.address} has {', '.join(problems)}: the broker would "
            "delete WAL records on its own (only the WAL's cleaner may). Set "
            + ", ".join(f"{k}={v}" for k, v in wanted.items())
            + f" (kafka-configs.sh --bootstrap-server {self.address} --alter --entity-type "
            f"topics --entity-name {topic} --add-config "
            + ",".join(f"{k}={v}" for k, v in wanted.items()) + ")",
            namespace=self.namespace)
