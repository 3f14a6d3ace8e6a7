"""An HTTP/1.1 fault proxy on 127.0.0.1 in front of an S3 server, switched by a test.

Unlike :mod:`netproxy` (bytes), it reads each request and answer whole, so a fault hits
one S3 operation exactly. Clients keep their connection alive; every request goes to
the server over a fresh connection (no stale pooled socket, no retry of its own). The
``Host`` header and every signed header pass unchanged, so SigV4 signatures hold;
``Expect: 100-continue`` is answered by the proxy itself (botocore does not sign it)
and not forwarded. Modes, switched from any thread:

* :meth:`S3Proxy.forward`: requests and answers pass.
* :meth:`S3Proxy.lose_put_answers`: the next ``n`` PUTs (of a path matching a regex, if
  given) reach the server and are carried out, but their answer is dropped and the
  client's connection reset: an indeterminate write. Then ``forward`` again.
* :meth:`S3Proxy.cut_put_bodies`: the next ``n`` PUTs (of a path matching a regex, if
  given) reach the server as their head alone, and the proxy then ends its side of the
  connection (FIN) without one byte of the body, as a writer that dies between a
  PUT's head and its body; the server's answer is recorded in :attr:`cut` and the
  client's connection reset. Then ``forward`` again.
* :meth:`S3Proxy.throttle`: the next ``n`` requests (``None``: all) get 503
  ``SlowDown`` from the proxy and never reach the server.
* :meth:`S3Proxy.down`: the port refuses connections and open ones are reset.
* :meth:`S3Proxy.ignore_conditions`: a PUT the server refused with 412 (its
  ``If-None-Match``/``If-Match`` failed) is answered 200, as a server or gateway that
  drops the header would answer (the header itself is signed, so it cannot be removed).

Counters: :attr:`S3Proxy.requests` (every request seen, by method), :attr:`lost` (the
``(method, path)`` of each answer dropped), :attr:`cut` (the ``(path, server's status)``
of each PUT cut before its body; status ``""``: the server closed without one),
:attr:`throttled`.
"""

from __future__ import annotations

import asyncio
import re
import socket
import struct
import threading
from collections import Counter
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any

from tests.helpers import free_port

HEAD_LIMIT = 1 << 20  # the longest request or response head read
SLOWDOWN = (b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
            b"<Message>Please reduce your request rate.</Message>"
            b"<RequestId>s3proxy</RequestId></Error>")


class _Reset(Exception):
    """End the client's connection with a reset."""


@dataclass
class _Message:
    """A request or response: its start line, headers and raw body (as framed)."""

    start: str
    headers: list[tuple[str, str]]
    body: bytes = b""
    chunked: bool = False

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)

    def head_bytes(self) -> bytes:
        lines = [self.start, *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def wants_close(self) -> bool:
        return (self.header("connection") or "").lower() == "close"


async def _read_head(reader: asyncio.StreamReader) -> _Message | None:
    """The next message head, or None at a clean end of stream."""
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ConnectionError("connection closed inside a message head") from exc
    lines = raw.decode("latin-1").split("\r\n")[:-2]
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return _Message(lines[0], headers)


async def _read_body(reader: asyncio.StreamReader, msg: _Message, to_eof: bool) -> None:
    """Read ``msg``'s body as framed (chunked, Content-Length, or until EOF)."""
    if "chunked" in (msg.header("transfer-encoding") or "").lower():
        msg.chunked = True
        parts = []
        while True:
            line = await reader.readuntil(b"\r\n")
            parts.append(line)
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:  # trailers, up to the empty line
                    trailer = await reader.readuntil(b"\r\n")
                    parts.append(trailer)
                    if trailer == b"\r\n":
                        break
                break
            parts.append(await reader.readexactly(size + 2))
        msg.body = b"".join(parts)
    elif msg.header("content-length") is not None:
        msg.body = await reader.readexactly(int(msg.header("content-length") or 0))
    elif to_eof:
        msg.body = await reader.read()


def _reset(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    writer.transport.abort()


@dataclass
class _State:
    """What the proxy does to the next requests (guarded by :attr:`S3Proxy._lock`)."""

    mode: str = "forward"
    left: int | None = 0  # requests the current fault still applies to (None: all)
    path: re.Pattern[str] | None = None
    methods: tuple[str, ...] = ("PUT",)
    lost: list[tuple[str, str]] = field(default_factory=list)
    cut: list[tuple[str, str]] = field(default_factory=list)
    throttled: int = 0


class S3Proxy:
    """A proxy from ``endpoint`` to ``upstream`` (``"http://127.0.0.1:PORT"``)."""

    def __init__(self, upstream: str) -> None:
        host_port = upstream.removeprefix("http://").rstrip("/")
        host, _, port = host_port.rpartition(":")
        self.upstream = (host, int(port))
        self.port = free_port()  # outside the ephemeral range: down() then up again
        self.requests: Counter[str] = Counter()
        self.lost_event = threading.Event()  # set when an answer was dropped
        self._state = _State()
        self._lock = threading.Lock()
        self._clients: set[asyncio.StreamWriter] = set()
        self._server: asyncio.base_events.Server | None = None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="s3proxy",
                                        daemon=True)
        self._thread.start()
        self._call(self._listen())

    # -- switched from the test thread -------------------------------------------------

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def mode(self) -> str:
        with self._lock:
            return self._state.mode

    @property
    def lost(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._state.lost)

    @property
    def cut(self) -> list[tuple[str, str]]:
        with self._lock:
            return list(self._state.cut)

    @property
    def throttled(self) -> int:
        with self._lock:
            return self._state.throttled

    def forward(self) -> None:
        """Pass everything (and listen again after :meth:`down`)."""
        self._set("forward", 0)
        self._call(self._listen())

    def lose_put_answers(self, n: int = 1, path: str | None = None,
                         methods: tuple[str, ...] = ("PUT",)) -> None:
        """Carry out the next ``n`` requests of ``methods`` whose path (with its query)
        matches regex ``path``, and drop their answers; then forward."""
        self._set("lose", n, re.compile(path) if path else None, methods)
        self.lost_event.clear()

    def cut_put_bodies(self, n: int = 1, path: str | None = None) -> None:
        """Send the next ``n`` PUTs whose path matches regex ``path`` to the server as
        their head alone, then end the proxy's side (FIN); then forward."""
        self._set("cut", n, re.compile(path) if path else None, ("PUT",))

    def lose_next_put_answer(self, path: str | None = None) -> None:
        self.lose_put_answers(1, path)

    def throttle(self, n: int | None = 1) -> None:
        """Answer the next ``n`` requests (``None``: every one) with 503 SlowDown."""
        self._set("throttle", n)

    def ignore_conditions(self) -> None:
        """Answer 200 to every PUT the server refuses with 412, until :meth:`forward`."""
        self._set("ignore_conditions", None)

    def down(self) -> None:
        """Refuse new connections and reset the open ones, until :meth:`forward`."""
        self._set("down", None)
        self._call(self._go_down())

    def close(self) -> None:
        self._call(self._shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    def _set(self, mode: str, left: int | None, path: re.Pattern[str] | None = None,
             methods: tuple[str, ...] = ("PUT",)) -> None:
        with self._lock:
            self._state.mode, self._state.left = mode, left
            self._state.path, self._state.methods = path, methods

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    # -- the proxy's loop --------------------------------------------------------------

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port,
                                                      limit=HEAD_LIMIT, reuse_address=True)

    async def _go_down(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._clients):
            _reset(writer)
        self._clients.clear()

    async def _shutdown(self) -> None:
        await self._go_down()  # the connections' tasks end on their reset
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=5)
            for task in pending:
                task.cancel()

    def _decide(self, req: _Message) -> str:
        """``forward``, ``lose`` or ``throttle`` for this request; counts it."""
        method, target = req.start.split(" ", 2)[:2]
        with self._lock:
            state = self._state
            self.requests[method] += 1
            if state.mode in ("down", "ignore_conditions"):
                return state.mode if state.mode == "down" or method == "PUT" else "forward"
            if state.mode == "throttle" and state.left != 0:
                state.throttled += 1
            elif state.mode in ("lose", "cut") and state.left != 0 and method in state.methods \
                    and (state.path is None or state.path.search(target)):
                if state.mode == "lose":  # (a cut is recorded with the server's answer)
                    state.lost.append((method, target))
            else:
                return "forward"
            action = state.mode
            if state.left is not None:
                state.left -= 1
                if state.left == 0:
                    state.mode = "forward"
            return action

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._clients.add(writer)
        try:
            while True:
                req = await _read_head(reader)
                if req is None:
                    break
                action = self._decide(req)
                if action == "down":
                    raise _Reset
                continue_ = (req.header("expect") or "").lower() == "100-continue"
                if action == "throttle":
                    if continue_:  # answered before the body: the client sends none
                        await self._answer_slowdown(writer, req, close=True)
                        break
                    await _read_body(reader, req, to_eof=False)
                    await self._answer_slowdown(writer, req, close=req.wants_close())
                    if req.wants_close():
                        break
                    continue
                if continue_:
                    req.headers = [(k, v) for k, v in req.headers if k.lower() != "expect"]
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                    await writer.drain()
                await _read_body(reader, req, to_eof=False)
                if action == "cut":
                    status = await self._head_alone(req)
                    with self._lock:
                        self._state.cut.append((req.start.split(" ", 2)[1], status))
                    raise _Reset
                resp = await self._exchange(req)
                if action == "lose":
                    self.lost_event.set()
                    raise _Reset
                if action == "ignore_conditions" and resp.start.split(" ", 2)[1] == "412":
                    resp = _Message("HTTP/1.1 200 OK", [
                        ("ETag", '"00000000000000000000000000000000"'), ("Content-Length", "0"),
                        ("Date", formatdate(usegmt=True)), ("Server", "s3proxy")])
                writer.write(resp.head_bytes() + resp.body)
                await writer.drain()
                framed = resp.header("content-length") is not None or resp.chunked \
                    or self._bodyless(req, resp)
                if req.wants_close() or resp.wants_close() or not framed:
                    break  # its end was the end of the server's stream: so is ours
        except (_Reset, ConnectionError, OSError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError, ValueError):
            _reset(writer)
        finally:
            self._clients.discard(writer)
            if not writer.is_closing():
                writer.close()

    @staticmethod
    def _bodyless(req: _Message, resp: _Message) -> bool:
        status = int(resp.start.split(" ", 2)[1])
        return req.start.startswith("HEAD ") or status in (204, 304) or status < 200

    async def _exchange(self, req: _Message) -> _Message:
        """Send ``req`` to the server on a fresh connection; its whole final answer. A
        server that is down resets the client (raises ConnectionError)."""
        up_reader, up_writer = await asyncio.open_connection(*self.upstream, limit=HEAD_LIMIT)
        try:
            up_writer.write(req.head_bytes() + req.body)
            await up_writer.drain()
            while True:
                resp = await _read_head(up_reader)
                if resp is None:
                    raise ConnectionError("the server closed the connection without an answer")
                if not resp.start.split(" ", 2)[1].startswith("1"):
                    break  # 1xx interim answers are the server's to the proxy
            if not self._bodyless(req, resp):
                await _read_body(up_reader, resp, to_eof=True)
            return resp
        finally:
            up_writer.transport.abort()

    async def _head_alone(self, req: _Message) -> str:
        """Send ``req``'s head to the server, none of its body, and end the proxy's side
        of the connection (FIN, not a reset: as the kernel does for a process that died
        after its send of the head); the status the server then answers ("": none)."""
        up_reader, up_writer = await asyncio.open_connection(*self.upstream, limit=HEAD_LIMIT)
        try:
            up_writer.write(req.head_bytes())
            await up_writer.drain()
            up_writer.write_eof()
            resp = await _read_head(up_reader)
            return "" if resp is None else resp.start.split(" ", 2)[1]
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            return ""
        finally:
            up_writer.transport.abort()

    async def _answer_slowdown(self, writer: asyncio.StreamWriter, req: _Message,
                               close: bool) -> None:
        headers = [("Content-Type", "application/xml"), ("Content-Length", str(len(SLOWDOWN))),
                   ("x-amz-request-id", "s3proxy"), ("Date", formatdate(usegmt=True)),
                   ("Server", "s3proxy")]
        if close:
            headers.append(("Connection", "close"))
        head = _Message("HTTP/1.1 503 Slow Down", headers)
        body = b"" if req.start.startswith("HEAD ") else SLOWDOWN
        writer.write(head.head_bytes() + body)
        await writer.drain()


@contextmanager
def s3_proxy(upstream: str) -> Iterator[S3Proxy]:
    """An :class:`S3Proxy` to ``upstream``, closed at the end."""
    proxy = S3Proxy(upstream)
    try:
        yield proxy
    finally:
        proxy.close()
