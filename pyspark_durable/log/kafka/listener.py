"""Which security protocol a Kafka listener speaks, asked in well under a second.

A client that speaks the wrong protocol to a listener learns nothing useful from its
own library: librdkafka reports "Local: Broker transport failure" or times out after
``connect_timeout_ms``, kafka-python a timeout, and neither says that the listener
wants SASL or TLS. Before a store's first request, :func:`check_listener` asks the
first bootstrap broker that accepts a connection two plain ``ApiVersions`` requests
(version 0, which every broker answers):

* a PLAINTEXT listener answers both;
* a SASL listener answers the first (clients learn the SASL versions from it) and
  closes the connection on the second: before the SASL handshake it takes nothing else;
* a TLS listener answers neither: the bytes are no TLS record, so it closes the
  connection or sends a TLS alert.

Only a mismatch raises (:class:`~pyspark_durable.errors.ConfigError` naming the
listener and the option that fixes it); a broker that cannot be reached, or answers
nothing in time, is left to the client, whose own error names it. A listener found
right is remembered for the process, so a store's later opens ask nothing.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Mapping
from typing import Any

from pyspark_durable.errors import ConfigError

PROBE_S = 0.8  # the whole probe, connect included
_CHECKED: set[tuple[str, str]] = set()
_LOCK = threading.Lock()
_TLS_RECORD_TYPES = {0x14, 0x15, 0x16, 0x17}  # change_cipher_spec, alert, handshake, data

WHERE = (
    'Spark: .option("kafka.security.protocol", ...) and kafka.sasl.*/kafka.ssl.*; '
    "the CLI: in the file given with --kafka-config; the Python API: options "
    "security_protocol, sasl_*, ssl_*"
)


def _api_versions(correlation: int) -> bytes:
    client = b"durablewal-probe"
    body = struct.pack(">hhih", 18, 0, correlation, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _answer(sock: socket.socket, deadline: float) -> bytes | None:
    """A whole response frame; b"" if the listener closed the connection; None if it
    said nothing in time."""
    data = b""
    while True:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return None
        except OSError:
            return b""  # reset: closed
        if not chunk:
            return data if data else b""
        data += chunk
        if data[0] in _TLS_RECORD_TYPES and data[1:2] == b"\x03":
            return data  # a TLS record (an alert): no Kafka frame begins so
        if len(data) >= 4 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
            return data


def _kafka_frame(data: bytes, correlation: int) -> bool:
    return len(data) >= 8 and struct.unpack(">i", data[4:8])[0] == correlation


def listener_kind(server: str, timeout_s: float = PROBE_S) -> str | None:
    """``"PLAINTEXT"``, ``"SASL"`` or ``"TLS"`` as the listener at ``server`` behaves
    (see the module docstring); None when it cannot be told (unreachable, silent)."""
    host, _, port = server.strip().rpartition(":")
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout_s)
    except (OSError, ValueError):
        return None
    with sock:
        try:
            sock.sendall(_api_versions(1))
            first = _answer(sock, deadline)
            if first is None:
                return None
            if not _kafka_frame(first, 1):
                return "TLS"
            sock.sendall(_api_versions(2))
        except OSError:
            return None
        second = _answer(sock, deadline)
    if second is None:
        return None
    return "PLAINTEXT" if _kafka_frame(second, 2) else "SASL"


def _protocol(client_config: Mapping[str, Any]) -> str:
    for key in ("security.protocol", "security_protocol"):
        if client_config.get(key):
            return str(client_config[key]).upper()
    return "PLAINTEXT"


def check_listener(address: str, client_config: Mapping[str, Any], namespace: str | None = None) -> None:
    """Refuse, quickly and by name, a client whose ``security.protocol`` the bootstrap
    listener does not speak: PLAINTEXT to a SASL or TLS listener, SASL_PLAINTEXT to a
    TLS one. TLS clients are left to their handshake, which names the problem."""
    protocol = _protocol(client_config)
    if protocol not in ("PLAINTEXT", "SASL_PLAINTEXT") or (address, protocol) in _CHECKED:
        return
    servers = [s for s in address.split(",") if s.strip()]
    kind = next((k for k in map(listener_kind, servers) if k is not None), None)
    if kind is None:
        return  # nothing answered: the client's own error says so
    wanted = {
        "SASL": "security.protocol=SASL_PLAINTEXT (or SASL_SSL) with sasl.mechanism "
        "and the user's credentials",
        "TLS": "security.protocol=SSL (or SASL_SSL) with ssl.cafile",
    }
    if kind == "PLAINTEXT" or (kind == "SASL" and protocol == "SASL_PLAINTEXT"):
        with _LOCK:
            _CHECKED.add((address, protocol))
        return
    raise ConfigError(
        f"Kafka broker {address} is a {kind} listener and this client speaks "
        f"{protocol}: set {wanted[kind]} ({WHERE})",
        namespace=namespace,
    )
