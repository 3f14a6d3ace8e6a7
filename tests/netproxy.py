"""A TCP proxy on 127.0.0.1 that a test switches between network conditions.

Put in front of a Kafka broker's advertised listener (``start_cluster(advertise=...)``),
it is every client's only way to that broker, so a test can partition a client from a
broker while the brokers still talk to each other. Modes (:meth:`Proxy.set`):

* ``forward``: bytes pass both ways.
* ``blackhole``: connections are accepted, nothing passes either way (a dead link: TCP
  to the proxy succeeds, no Kafka answer comes). Bytes already read are held, not lost,
  and pass on when the link heals, as TCP would retransmit them.
* ``requests_only``: client bytes reach the broker, its answers are held: a request
  that is carried out but whose answer never arrives (an indeterminate commit).
* ``answers_lost_after_produce``: bytes pass both ways until a client sends a Produce
  request, which reaches the broker; from then on it is ``requests_only``. The next
  append is carried out and its answer lost: an indeterminate commit, precisely.
* ``reset``: every open connection is reset (RST), and new ones are reset on accept.
* ``latency``: each chunk waits ``latency_ms`` before it is passed on (a slow link).

Whatever the mode, :attr:`Proxy.requests` counts the requests clients sent through it by
Kafka api key (0 Produce, 1 Fetch, 2 ListOffsets, 3 Metadata, ...): what an operation
asks the broker, seen on the wire.

One asyncio loop in a daemon thread serves every proxy of the process (:class:`Proxies`).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

MODES = ("forward", "blackhole", "requests_only", "answers_lost_after_produce", "reset",
         "latency")
CHUNK = 1 << 16
PRODUCE = 0  # Kafka's api key of a Produce request


class _Frames:
    """Follows the Kafka request frames a client sends (int32 size, then int16 api key
    first in the body), to tell when a Produce request passes; counts each request's
    api key into ``counts``."""

    def __init__(self, counts: Counter[int]) -> None:
        self.header = b""  # the size and api key of the frame begun, while incomplete
        self.left = 0  # body bytes of the current frame not seen yet
        self.counts = counts

    def produce_in(self, data: bytes) -> bool:
        seen = False
        i = 0
        while i < len(data):
            if self.left:
                step = min(self.left, len(data) - i)
                self.left -= step
                i += step
                continue
            take = min(6 - len(self.header), len(data) - i)
            self.header += data[i:i + take]
            i += take
            if len(self.header) == 6:
                size, api_key = struct.unpack(">ih", self.header)
                seen = seen or api_key == PRODUCE
                self.counts[api_key] += 1
                self.left = size - 2
                self.header = b""
        return seen


class _Link:
    """One client connection and its upstream connection."""

    def __init__(self, client: asyncio.StreamWriter, upstream: asyncio.StreamWriter) -> None:
        self.writers = (client, upstream)

    def reset(self) -> None:
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


class Proxy:
    """One listening port forwarding to ``upstream_port``; switched by :meth:`set`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, upstream_port: int) -> None:
        self.loop = loop
        self.upstream_port = upstream_port
        self.mode = "forward"
        self.latency_s = 0.0
        self.links: set[_Link] = set()
        self.opened = 0  # client connections accepted, for a test's report
        self.requests: Counter[int] = Counter()  # requests passed, by Kafka api key
        self.tripped = threading.Event()  # set when answers_lost_after_produce turned
        self._up = asyncio.Event()  # client -> broker may pass
        self._down = asyncio.Event()  # broker -> client may pass
        self._server: asyncio.base_events.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self._up.set()
        self._down.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def set(self, mode: str, latency_ms: float = 0.0) -> None:
        """Switch mode (thread-safe; returns once the proxy acts on it)."""
        if mode not in MODES:
            raise ValueError(f"unknown proxy mode {mode!r}; one of {MODES}")
        asyncio.run_coroutine_threadsafe(self._set(mode, latency_ms), self.loop).result(10)

    async def _set(self, mode: str, latency_ms: float) -> None:
        self.mode = mode
        self.tripped.clear()
        self.latency_s = latency_ms / 1000 if mode == "latency" else 0.0
        for event, passes in ((self._up, mode != "blackhole"),
                              (self._down, mode not in ("blackhole", "requests_only"))):
            event.set() if passes else event.clear()
        if mode == "reset":
            for link in list(self.links):
                link.reset()
            self.links.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.opened += 1
        if self.mode == "reset":
            _Link(writer, writer).reset()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _Link(writer, writer).reset()  # the broker is down: so is the link
            return
        link = _Link(writer, up_writer)
        self.links.add(link)
        try:
            await asyncio.gather(self._pump(reader, up_writer, self._up, _Frames(self.requests)),
                                 self._pump(up_reader, writer, self._down))
        finally:
            self.links.discard(link)
            for w in (writer, up_writer):
                w.transport.abort()

    async def _pump(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                    open_: asyncio.Event, frames: _Frames | None = None) -> None:
        try:
            while True:
                await open_.wait()
                data = await src.read(CHUNK)
                if not data:
                    break
                if self.latency_s:
                    await asyncio.sleep(self.latency_s)
                await open_.wait()  # a chunk read just before the link went dead waits
                if frames is not None and frames.produce_in(data) \
                        and self.mode == "answers_lost_after_produce":
                    self.mode = "requests_only"
                    self._down.clear()  # before the broker can answer this request
                    self.tripped.set()
                dst.write(data)
                await dst.drain()
        except (ConnectionError, OSError):
            pass  # the other side went away or was reset: the link ends
        finally:
            dst.transport.abort()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for link in list(self.links):
            link.reset()


class Proxies:
    """The proxies of a test, served by one event loop in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.by_port: dict[int, Proxy] = {}  # upstream port -> its proxy
        self._thread = threading.Thread(target=self.loop.run_forever, name="netproxy",
                                        daemon=True)
        self._thread.start()

    def add(self, upstream_port: int) -> Proxy:
        proxy = Proxy(self.loop, upstream_port)
        asyncio.run_coroutine_threadsafe(proxy.start(), self.loop).result(10)
        self.by_port[upstream_port] = proxy
        return proxy

    def all(self) -> list[Proxy]:
        return list(self.by_port.values())

    def set_all(self, mode: str, latency_ms: float = 0.0) -> None:
        for proxy in self.all():
            proxy.set(mode, latency_ms)

    def close(self) -> None:
        async def close_all() -> None:
            for proxy in self.all():
                await proxy.close()

        asyncio.run_coroutine_threadsafe(close_all(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)


@contextmanager
def proxies() -> Iterator[Proxies]:
    p = Proxies()
    try:
        yield p
    finally:
        p.close()
