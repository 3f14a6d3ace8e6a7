"""The broker probe: the error messages of the log and of both clients name which
bootstrap brokers are down (:func:`broker_reachability`)."""

from __future__ import annotations

import socket
import threading
import time

_PROBE_CACHE: dict[str, tuple[float, str]] = {}
_PROBE_LOCK = threading.Lock()
PROBE_TTL_S = 2.0
PROBE_TIMEOUT_S = 0.5


def broker_reachability(address: str) -> str:
    """Which bootstrap brokers refuse a TCP connection now: the cause of an append that
    timed out is otherwise invisible (librdkafka says "Local: Message timed out",
    kafka-python only that the batch expired). A few short connects, cached for a
    moment; one probe serves the failures of a whole batch (one report per record)."""
    now = time.monotonic()
    with _PROBE_LOCK:
        hit = _PROBE_CACHE.get(address)
        if hit is not None and now - hit[0] < PROBE_TTL_S:
            return hit[1]
    down: list[str] = []
    servers = [a.strip() for a in address.split(",") if a.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), PROBE_TIMEOUT_S):
                pass
        except (OSError, ValueError) as exc:
            down.append(
                f"{server} ({exc.strerror or exc})" if isinstance(exc, OSError) else f"{server} ({exc})"
            )
    if not down:
        text = f"all {len(servers)} bootstrap brokers accept connections"
    else:
        text = (
            f"{len(down)} of {len(servers)} Kafka brokers unavailable: {', '.join(down)}; "
            "a read needs its partition's leader, an append (acks=all) the leader "
            "and min.insync.replicas in-sync replicas"
        )
    with _PROBE_LOCK:
        _PROBE_CACHE[address] = (now, text)
    return text
