"""The interfaces each Kafka client implements, and what the log relies on from each.

A client package (:mod:`~pyspark_durable.log.kafka.confluent`,
:mod:`~pyspark_durable.log.kafka.kafka_python`) provides a :class:`Reader`, a
:class:`Sender` and a :class:`TopicAdmin`, bundled as one :class:`KafkaClient`. Every
failure of a method below is one of this package's typed errors
(:mod:`pyspark_durable.errors`) naming the broker: ``BackendUnavailable`` when a retry
may succeed, ``LogNotFound`` for a missing topic, ``ConfigError`` for a refused option.
This module imports neither client.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol

from pyspark_durable.log.base import Entry, Record


class Reader(Protocol):
    """One topic's partition 0, read by offset (assign/seek, never a consumer group)."""

    def begin(self) -> int:
        """The first offset the broker still holds, asked of the partition's leader now."""
        ...

    def watermarks(self) -> tuple[int, int]:
        """(first offset held, high watermark) from the leader: every entry acknowledged
        with acks=all before the call is below the high watermark."""
        ...

    def seek(self, offset: int) -> None:
        """Make ``offset`` the next entry :meth:`fetch` returns; asks the broker nothing."""
        ...

    def fetch(self, max_records: int | None, timeout_ms: int) -> list[Entry]:
        """Entries from the position on, in offset order and without gaps, at most
        ``max_records``; empty at the end of the partition or once ``timeout_ms`` passed.
        A position below the first offset held is ``OffsetOutOfRange``, never a jump."""
        ...

    def idle(self) -> None:
        """The reader goes back to the pool: after this it sends the broker no request
        until the next :meth:`seek`."""
        ...

    def close(self) -> None:
        """Release the reader's connections; never raises."""
        ...


class Sender(Protocol):
    """The producer of a store (acks=all, idempotent), shared by its logs."""

    def send(
        self,
        topic: str,
        records: Sequence[Record],
        acked: Callable[[int, int], None],
        failed: Callable[[BaseException], None],
        where: Mapping[str, Any],
    ) -> None:
        """Queue ``records`` for partition 0 of ``topic`` in their order; later, from any
        thread, ``acked(i, offset)`` once per record acknowledged by all in-sync replicas,
        or ``failed(typed error)`` for a record that was not (it may still be stored).
        Retries never duplicate or reorder a record (idempotence)."""
        ...

    @property
    def broken(self) -> bool:
        """True once a failure left the sender unusable for good (librdkafka's fatal
        errors, such as a refused producer id): the pool makes a new one."""
        ...

    def login_refused(self) -> None:
        """The token endpoint refused the client's login (its OAuth client secret): the
        sender is :attr:`broken` if the client would not ask the endpoint again at once."""
        ...

    def hurry(self) -> None:
        """Send what lingers (``linger_ms``) now, without waiting: a caller is blocked on it."""
        ...

    def wait(self, future: Future, timeout_s: float) -> bool:
        """Block until ``future`` (resolved by ``acked``/``failed``) is done, or
        ``timeout_s`` passed: True when done; other threads' sends keep completing."""
        ...

    def close(self, timeout_s: float) -> None:
        """The store is done with the sender: what it sent is delivered or failed within
        ``timeout_s``; a sender shared with other stores stays usable by them."""
        ...


class TopicAdmin(Protocol):
    """Every topic operation the store calls (each client's admin is a
    :class:`~pyspark_durable.log.kafka.topics.OneTopicRule`, which gives ``ensure`` and
    ``retention_problems`` over the primitives below)."""

    namespace: str | None
    address: str

    def ensure(self, topic: str, create: bool, configs: Mapping[str, str]) -> bool:
        """True when ``topic`` exists (made with ``configs`` if missing and ``create``)
        with one partition and, if ``create``, no broker-side retention; False when it is
        missing and not ``create``; a ``ConfigError`` for a topic the log cannot use."""
        ...

    def retention_problems(self, topic: str, compacted: bool) -> list[str]:
        """The topic's settings under which the broker would delete records on its own,
        as ``name=value``; empty when only the WAL deletes."""
        ...

    def list_topics(self) -> list[str]:
        """Every topic name the cluster's metadata holds now."""
        ...

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count; None when the cluster does not know the topic."""
        ...

    def create(self, topic: str, configs: Mapping[str, str]) -> int | None:
        """Create ``topic`` with one partition (losing a race to another creator is no
        error); its partition count once metadata shows it, None if it never did within
        the request timeout."""
        ...

    def delete_topic(self, topic: str) -> None:
        """Delete ``topic``; one already gone is no error."""
        ...

    def empty(self, topic: str, count: int) -> bool:
        """True when none of the topic's ``count`` partitions ever held an entry (every
        end offset is 0)."""
        ...

    def topic_configs(self, topic: str, names: tuple[str, ...]) -> dict[str, str | None]:
        """The topic's effective value of each of ``names`` (its own or the broker's
        default); None for a name the broker does not report."""
        ...

    def set_topic_configs(self, topic: str, configs: Mapping[str, str]) -> None:
        """Set ``configs`` on the topic (IncrementalAlterConfigs), leaving the others."""
        ...

    def delete_records(self, topic: str, offset: int) -> bool:
        """DeleteRecords below ``offset`` of partition 0: True once the broker did it;
        False where the service does not support it (then nothing was deleted)."""
        ...

    def close(self) -> None:
        """Release the admin's connections; never raises."""
        ...


class KafkaClient(NamedTuple):
    """One client implementation, as the store uses it: chosen once per store."""

    name: str
    configs: Callable[..., tuple[dict[str, dict[str, Any]], int]]
    reader: Callable[..., Reader]
    sender: Callable[..., Sender]
    admin: Callable[..., TopicAdmin]
    keys: Callable[[], frozenset[str]] | None = None  # None: the client checks its own names
    default_of: Callable[[str], Any] | None = None
