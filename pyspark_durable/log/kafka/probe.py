"""The broker probe: the error messages of the log and of both clients name which
bootstrap brokers are down or do not answer (:func:`broker_reachability`)."""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

_PROBE_CACHE: dict[str, tuple[float, str, bool]] = {}
_PROBE_LOCK = threading.Lock()
PROBE_TTL_S = 2.0
PROBE_TIMEOUT_S = 0.5


# ApiVersions v0 (api key 18), correlation id 0x70726f62, client id "durablewal-probe"
_CLIENT_ID = b"durablewal-probe"
_CORRELATION = 0x70726F62
_API_VERSIONS = struct.pack(">hhih", 18, 0, _CORRELATION, len(_CLIENT_ID)) + _CLIENT_ID
_REQUEST = struct.pack(">i", len(_API_VERSIONS)) + _API_VERSIONS
_TLS_ALERT = 0x15  # a TLS listener answers plaintext bytes with an alert record


def probe_broker(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None if the broker answers a Kafka request (ApiVersions) within ``timeout_s``,
    else what was observed: a refused or timed-out connect, or a TCP connection that
    succeeded but carried no Kafka answer (a dead link behind a proxy or firewall, a
    hung broker). A TLS listener's alert counts as an answer."""
    try:
        sock = socket.create_connection((host, port), timeout_s)
    except OSError as exc:
        return f"TCP connect failed: {exc.strerror or exc}"
    with sock:
        deadline = time.monotonic() + timeout_s
        try:
            sock.sendall(_REQUEST)
            got = b""
            while len(got) < 8:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(8 - len(got))
                if not chunk:
                    break
                got += chunk
                if got[0] == _TLS_ALERT:
                    return None
        except TimeoutError:
            return f"TCP connect succeeded but no Kafka response within {timeout_s:g} s"
        except OSError as exc:
            return f"TCP connect succeeded, then {exc.strerror or exc} before a Kafka response"
    if len(got) == 8 and struct.unpack(">i", got[4:])[0] == _CORRELATION:
        return None
    return "TCP connect succeeded but the connection closed without a Kafka response"


def _probe_server(server: str) -> str | None:
    host, _, port = server.rpartition(":")
    try:
        return probe_broker(host.strip("[]"), int(port))
    except ValueError as exc:
        return str(exc)


def broker_reachability(address: str) -> str:
    """:func:`probe_brokers`' report."""
    return probe_brokers(address)[0]


def brokers_answer(address: str) -> bool:
    """Does every bootstrap broker answer a Kafka request now (:func:`probe_brokers`)?"""
    return probe_brokers(address)[1]


def probe_brokers(address: str) -> tuple[str, bool]:
    """What the bootstrap brokers do now: the cause of an append that timed out is
    otherwise invisible (librdkafka says "Local: Message timed out", kafka-python only
    that the batch expired). Each gets a short connect and a Kafka request
    (:func:`probe_broker`), so a link that takes connections but carries nothing is told
    from a broker that answers. Cached for a moment; one probe serves the failures of a
    whole batch (one report per record). Returns the report, and whether all answered."""
    now = time.monotonic()
    with _PROBE_LOCK:
        hit = _PROBE_CACHE.get(address)
        if hit is not None and now - hit[0] < PROBE_TTL_S:
            return hit[1], hit[2]
    servers = [a.strip() for a in address.split(",") if a.strip()]
    with ThreadPoolExecutor(max(1, len(servers))) as pool:  # all at once: one timeout
        seen = list(pool.map(_probe_server, servers))
    down = [f"{server} ({what})" for server, what in zip(servers, seen, strict=True)
            if what is not None]
    if not down:
        text = (f"all {len(servers)} bootstrap brokers answered a Kafka request within "
                f"{PROBE_TIMEOUT_S:g} s")
    else:
        text = (
            f"{len(down)} of {len(servers)} Kafka brokers unavailable: {', '.join(down)}; "
            "a read needs its partition's leader, an append (acks=all) the leader "
            "and min.insync.replicas in-sync replicas"
        )
    with _PROBE_LOCK:
        _PROBE_CACHE[address] = (now, text, not down)
    return text, not down
