"""TCP ports on 127.0.0.1 for brokers and the servers tests start beside them: free
now, outside the kernel's ephemeral range, and never handed out twice by one process."""

from __future__ import annotations

import random
import socket
from pathlib import Path


def _ephemeral_ports() -> range:
    """The ports the kernel hands to outgoing connections and to bind(port 0)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)  # Linux's default


_ports = random.Random()
_given: set[int] = set()  # never the same port twice: a cluster's ports are all drawn first


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, chosen outside the
    kernel's ephemeral range: a broker restarted on its port after a kill -9 must find
    it free, and a port of that range can meanwhile become the local end of any
    client's outgoing connection (to the other brokers, say)."""
    ephemeral = _ephemeral_ports()
    for _ in range(1000):
        port = _ports.randrange(10_000, 65_536)
        if port in ephemeral or port in _given:
            continue
        if not port_free(port):
            continue  # taken: draw again
        _given.add(port)
        return port
    raise OSError("no free TCP port outside the ephemeral range on 127.0.0.1")


def port_free(port: int) -> bool:
    """Whether a listener could bind the port now. SO_REUSEADDR, as Kafka's own server
    socket: the connections of a broker just stopped (TIME_WAIT) do not take the port,
    a listening socket does."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
