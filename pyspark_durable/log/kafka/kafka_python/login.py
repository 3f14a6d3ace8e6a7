"""A refused login on kafka-python, told within about a second.

kafka-python's bootstrap retries any failed connection until its timeout, and 3.0.12
loses the broker's SaslAuthenticate error when the broker closes the connection right
after it (the bytes and the EOF arrive in one read), so the failure looks like "socket
disconnected". :func:`check_credentials` makes one connection first, with kafka-python's
own connection code (only when SASL or TLS is configured): a connection that answered
ApiVersions and then closed during the SASL exchange is a refused login.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import kafka.errors as kerr
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector

from pyspark_durable.log.kafka.auth import authentication_failed, protocol_of


def check_credentials(config: Mapping[str, Any], address: str, timeout_ms: int,
                      **where: Any) -> None:
    """One connection with kafka-python's own connection code, when SASL or TLS is
    configured: a refused login or certificate is :class:`AuthenticationFailed`;
    anything else (an unreachable broker) is left to the client's own bootstrap."""
    protocol = protocol_of(config)
    if protocol == "PLAINTEXT":
        return
    provider = config.get("sasl_oauth_token_provider")
    if provider is not None and protocol.startswith("SASL"):
        provider.token()  # a refused client secret is told by the token endpoint, at once
    net = NetworkSelector(**config)
    manager = KafkaConnectionManager(net, **config)

    async def connected(conn: Any) -> None:
        await conn

    try:
        for node in manager.cluster.bootstrap_brokers():
            conn = manager.get_connection(node.node_id, timeout_ms=timeout_ms,
                                          pop_on_close=False, refresh_metadata_on_err=False,
                                          reset_backoff_on_connect=False)
            try:
                net.run(connected, conn)
                return  # logged in: the credentials are good
            except (kerr.SaslAuthenticationFailedError, kerr.IllegalSaslStateError,
                    kerr.UnsupportedSaslMechanismError) as exc:
                raise authentication_failed(address, config, f"{type(exc).__name__}: {exc}",
                                            **where) from None
            except kerr.KafkaError as exc:
                text = str(exc)
                if protocol.endswith("SSL") and ("Handshake failed" in text
                                                 or "CERTIFICATE_VERIFY_FAILED" in text):
                    raise authentication_failed(address, config, text, **where) from None
                if protocol.startswith("SASL") and conn.broker_version_data is not None \
                        and isinstance(exc, kerr.KafkaConnectionError):
                    raise authentication_failed(
                        address, config, "the broker closed the connection during the SASL "
                        f"exchange ({text})", **where) from None
                continue  # not reachable: try the next, then let the bootstrap report it
    finally:
        manager.close()
        net.close()
