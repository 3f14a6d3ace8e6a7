"""librdkafka's consumer as a :class:`~pyspark_durable.log.kafka.api.Reader` of partition
0 of one topic: ``assign()`` with an explicit offset, never a group join.

The watermarks are one ``get_watermark_offsets`` call (ListOffsets earliest and latest,
from the partition's leader). A fetch takes what the prefetch queue holds at once and
waits only when it is empty, in short slices, so the end of a log answers quickly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from pyspark_durable.errors import BackendUnavailable, LogNotFound
from pyspark_durable.log.base import Entry
from pyspark_durable.log.kafka.acls import principal_of
from pyspark_durable.log.kafka.confluent.config import READER_GROUP
from pyspark_durable.log.kafka.confluent.errors import (
    RETRY_BACKOFF_S,
    TRANSIENT_FETCH,
    build,
    translated,
    typed,
)

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

log = logging.getLogger(__name__)

FETCH_SLICE_S = 0.05  # one consume() wait: short, so an end of log answers quickly
NEW_TOPIC_GRACE_S = 5.0  # how long an unknown partition may be a topic just created


class ConfluentReader:
    """One consumer assigned to partition 0 of a topic, as a
    :class:`~pyspark_durable.log.kafka.api.Reader`."""

    def __init__(self, settings: KafkaSettings, topic: str, where: Mapping[str, Any]) -> None:
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
        (_DESTROY_BROKER, _TRANSPORT) rather than sending it to the new leader. A partition
        this client does not know yet (_UNKNOWN_PARTITION, as LogNotFound) is asked again
        for up to :data:`NEW_TOPIC_GRACE_S`: a topic just created, even one the admin
        client already saw, reaches each broker's metadata in its own time, and this
        client may ask one that has not heard of it (seen on 3 nodes under load). A topic
        really gone is LogNotFound after that grace.
        """
        deadline = time.monotonic() + self.timeout_s
        unknown_until = time.monotonic() + min(NEW_TOPIC_GRACE_S, self.timeout_s)
        while True:
            try:
                with translated("reading watermarks", self.address, self.principal, **self.where):
                    # one attempt waits a slice: a request queued for a dead leader
                    # would wait out the whole timeout
                    left = deadline - time.monotonic()
                    return self.consumer.get_watermark_offsets(
                        self.tp, timeout=max(0.1, min(left, max(1.0, self.timeout_s / 10))))
            except BackendUnavailable:
                if time.monotonic() + RETRY_BACKOFF_S >= deadline:
                    raise
                time.sleep(RETRY_BACKOFF_S)  # the leader moves: ask again shortly
            except LogNotFound:
                if time.monotonic() + RETRY_BACKOFF_S >= unknown_until:
                    raise
                time.sleep(RETRY_BACKOFF_S)  # metadata of a new topic: ask again shortly

    def begin(self) -> int:
        return self.watermarks()[0]

    def seek(self, offset: int) -> None:
        with translated("seeking", self.address, self.principal, **self.where):
            self.consumer.assign([TopicPartition(self.topic, 0, offset)])

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]:
        """Entries from the position on: the first that arrive, at most ``max_records``;
        an empty list at the end of the partition or when ``timeout_ms`` passed."""
        want = max(1, min(max_records or 10_000, 10_000))
        deadline = time.monotonic() + timeout_ms / 1000
        with translated("fetching", self.address, self.principal, **self.where):
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
        with translated("releasing a consumer", self.address, self.principal, **self.where):
            self.consumer.unassign()

    def close(self) -> None:
        try:
            self.consumer.close()
        except (KafkaException, RuntimeError) as exc:
            log.debug("closing a Kafka consumer failed: %s", exc)
