"""The registry: what a namespace's snapshots topic holds, read into a map by key.

Keys (the topic is compacted, so the newest value of every key is all a reader needs)::

    "snapshot/{name}/{version:020d}"  a snapshot version (an empty value: deleted)
    "log/{name}"                      a log of the namespace (written before its topic)
    "lowwater/{name}"                 the logical low watermark of a log

The map is caught up by scanning the topic from the last position seen: fine for small,
rare snapshots. A logical low watermark never moves down, whatever order racing writers
land in.

**Deletion** (:meth:`Registry.delete_before`) first writes the logical low watermark
(acks=all), then calls DeleteRecords, so a crash between the two still hides the
entries. Kafka-protocol services without DeleteRecords are detected once per store and
logged once; reads then rely on the logical watermark, which every process reads before
a read.
"""

from __future__ import annotations

import logging
import threading

from pyspark_durable.log.base import Record
from pyspark_durable.log.kafka.api import TopicAdmin
from pyspark_durable.log.kafka.partition import Partition
from pyspark_durable.log.kafka.pool import ClientPool
from pyspark_durable.log.kafka.topics import SNAPSHOTS, SNAPSHOTS_TOPIC_CONFIG

log = logging.getLogger(__name__)


class Registry:
    """The snapshots topic of ``pool.namespace`` as a map, and the deletion rule."""

    def __init__(self, pool: ClientPool, admin: TopicAdmin) -> None:
        self.pool = pool
        self.admin = admin
        self.namespace = pool.namespace
        self.topic = f"{pool.namespace}_{SNAPSHOTS}"
        self._lock = threading.Lock()
        self._values: dict[bytes, bytes] = {}
        self._partition: Partition | None = None
        self._writable = False  # the topic was checked for writing (OneTopicRule.ensure)
        self._pos = 0
        self._delete_records_ok: bool | None = None

    def _open(self, create: bool) -> Partition | None:
        """The topic's partition; None if the topic does not exist and not ``create``."""
        if self._partition is None or (create and not self._writable):
            if not self.admin.ensure(self.topic, create, SNAPSHOTS_TOPIC_CONFIG):
                return None
            if create:
                self._writable = True
            if self._partition is None:
                self._partition = Partition(
                    self.pool, self.topic, {"namespace": self.namespace, "log": SNAPSHOTS}
                )
        return self._partition

    def view(self) -> dict[bytes, bytes]:
        """Catch up with the snapshots topic; return the latest value of every key."""
        with self._lock:
            partition = self._open(create=False)
            if partition is not None:
                begin, high = partition.bounds()
                for entry in partition.scan(max(self._pos, begin), high):
                    if entry.key.startswith(b"lowwater/"):  # never moves down (racing writers)
                        entry_low = int(entry.value or 0)
                        if entry_low <= int(self._values.get(entry.key) or 0):
                            continue
                    self._values[entry.key] = entry.value
                self._pos = max(self._pos, high)
            return dict(self._values)

    def put(self, key: bytes, value: bytes | None) -> None:
        """Write ``key`` (``None``: a tombstone), acknowledged when this returns."""
        with self._lock:
            partition = self._open(create=True)
        assert partition is not None
        partition.append([Record(key, value)])

    def logs(self) -> list[str]:
        """The log names registered (their topics may be gone since)."""
        return [k[4:].decode() for k in self.view() if k.startswith(b"log/")]

    def add_log(self, name: str) -> None:
        """Register ``name`` unless it is already: before its topic exists, so that a
        topic is never a log of the namespace without the registry knowing it."""
        if b"log/" + name.encode() not in self.view():
            self.put(b"log/" + name.encode(), b"")

    def logical_low(self, name: str) -> int:
        """The logical low watermark of log ``name``: no read goes below it."""
        value = self.view().get(b"lowwater/" + name.encode())
        return int(value) if value else 0

    def delete_before(self, name: str, topic: str, offset: int) -> None:
        """Hide the entries of log ``name`` below ``offset``, then delete them where the
        broker can (see the module docstring)."""
        self.put(b"lowwater/" + name.encode(), str(offset).encode())
        if self._delete_records_ok is False:
            return
        ok = self.admin.delete_records(topic, offset)
        if not ok and self._delete_records_ok is None:
            log.warning(
                "namespace=%s: Kafka broker %s does not support DeleteRecords; deleted "
                "entries stay on the broker and reads skip them using the logical low "
                "watermark in topic %s",
                self.namespace,
                self.pool.settings.bootstrap_servers,
                self.topic,
            )
        self._delete_records_ok = ok

    def reset(self) -> None:
        """Forget what was read and checked: the next call reads the topic afresh."""
        with self._lock:
            partition, self._partition = self._partition, None
            self._values, self._pos, self._writable = {}, 0, False
        if partition is not None:
            partition.close()

    def close(self) -> None:
        if self._partition is not None:
            self._partition.close()
