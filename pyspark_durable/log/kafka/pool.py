"""The store's clients for its logs: one shared sender, and a bounded pool of idle readers.

Each idle reader holds a consumer's sockets and, on librdkafka, its threads, so the pool
keeps at most :data:`IDLE_READERS` of them across all the store's logs, closing the
longest idle first: a namespace of many regions read one after another keeps a few
consumers, not one per region. A reader goes back to its own topic only, and one that
fails while borrowed is closed, never pooled.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyspark_durable.log.kafka.api import KafkaClient, Reader, Sender

if TYPE_CHECKING:
    from pyspark_durable.log.kafka.settings import KafkaSettings

IDLE_READERS = 4  # idle readers a store keeps open across its logs


class ClientPool:
    """The sender and the idle readers of one store; the only owner of both."""

    def __init__(self, client: KafkaClient, settings: KafkaSettings, namespace: str) -> None:
        self.client = client
        self.settings = settings
        self.namespace = namespace
        self._lock = threading.Lock()
        self._sender: Sender | None = None
        self._idle: deque[tuple[str, Reader]] = deque()  # (topic, reader), oldest first
        # a reader borrowed before its topic was dropped (or the pool closed) is closed
        # when it comes back: its log is gone
        self._dropped: dict[str, int] = {}
        self._closes = 0

    def sender(self) -> Sender:
        """The store's one sender, made on first use, and again once it is broken (a
        refusal left it unusable): so a right granted later works in this process."""
        with self._lock:
            if self._sender is None or self._sender.broken:
                self._sender = self.client.sender(self.settings, self.namespace)
            return self._sender

    def new_reader(self, topic: str, where: Mapping[str, Any]) -> Reader:
        """A new reader of ``topic``, made by the store's client."""
        return self.client.reader(self.settings, topic, where)

    @contextmanager
    def borrow(self, topic: str, where: Mapping[str, Any]) -> Iterator[Reader]:
        """A reader of ``topic``: the one parked last for it, else a new one; parked again
        afterwards, or closed if the borrower failed."""
        with self._lock:
            generation = (self._closes, self._dropped.get(topic, 0))
            reader = self._take(topic)
        if reader is None:
            reader = self.new_reader(topic, where)
        ok = False
        try:
            yield reader
            ok = True
        except GeneratorExit:  # a scan stopped early: the reader is fine
            ok = True
            raise
        finally:
            self._give_back(topic, reader, ok, generation)

    def _take(self, topic: str) -> Reader | None:
        for i in range(len(self._idle) - 1, -1, -1):
            if self._idle[i][0] == topic:
                reader = self._idle[i][1]
                del self._idle[i]
                return reader
        return None

    def _give_back(self, topic: str, reader: Reader, ok: bool, generation: tuple[int, int]) -> None:
        if ok:
            reader.idle()
        with self._lock:
            keep = ok and generation == (self._closes, self._dropped.get(topic, 0))
            if keep:
                self._idle.append((topic, reader))
            over = max(0, len(self._idle) - IDLE_READERS)
            evicted = [self._idle.popleft()[1] for _ in range(over)]
        if not keep:
            reader.close()
        for idle in evicted:
            idle.close()

    def idle(self, topic: str) -> list[Reader]:
        """The readers of ``topic`` parked now, oldest first."""
        with self._lock:
            return [reader for t, reader in self._idle if t == topic]

    def idle_readers(self) -> int:
        """Readers kept open, idle, across the store's logs."""
        with self._lock:
            return len(self._idle)

    def drop(self, topic: str) -> None:
        """Close the idle readers of ``topic``; those borrowed now close when they return."""
        with self._lock:
            self._dropped[topic] = self._dropped.get(topic, 0) + 1
            dropped = [reader for t, reader in self._idle if t == topic]
            self._idle = deque(entry for entry in self._idle if entry[0] != topic)
        for reader in dropped:
            reader.close()

    def close(self) -> None:
        """Close every idle reader, and the sender once what it sent is delivered or failed
        within the request timeout."""
        with self._lock:
            self._closes += 1
            idle, self._idle = [reader for _, reader in self._idle], deque()
            sender, self._sender = self._sender, None
        for reader in idle:
            reader.close()
        if sender is not None:
            sender.close(self.settings.request_timeout_ms / 1000)
