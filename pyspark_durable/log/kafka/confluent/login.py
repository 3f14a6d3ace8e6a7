"""A refused login on librdkafka, told within about a second.

librdkafka reports a failed SASL exchange or TLS handshake only through its
``error_cb`` and keeps retrying, so a metadata request just times out (after
``connect_timeout_ms``). The admin client gets an :class:`AuthWatch` as ``error_cb``;
:func:`watched_metadata` asks for metadata in short, growing slices and polls the
watch between them, and :func:`login_failed` turns what the watch saw into a typed
error. librdkafka's own OIDC token fetch fails with its own words
(:data:`TOKEN_FAILED`): a token endpoint it could not reach is retriable, one that
refused the client is told as the endpoint's refusal, not the broker's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from pyspark_durable import secrets
from pyspark_durable.errors import BackendUnavailable, DurableWalError
from pyspark_durable.log.kafka.auth import (
    authentication_failed,
    login_refused,
    mechanism_of,
    protocol_of,
)

FIRST_SLICE_S = 0.5  # first metadata wait; doubled up to MAX_SLICE_S
MAX_SLICE_S = 4.0
TOKEN_FAILED = "Failed to acquire SASL OAUTHBEARER token: "  # librdkafka's OIDC fetch
# libcurl's words, in librdkafka's failure, for an endpoint it could not reach
ENDPOINT_DOWN = ("Failed to connect", "Could not connect", "Could not resolve",
                 "Timeout was reached")


class AuthWatch:
    """A librdkafka ``error_cb``: keeps the first authentication or TLS failure."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self._lock = threading.Lock()

    def __call__(self, err: Any) -> None:
        codes = (KafkaError._AUTHENTICATION, KafkaError._SSL,
                 KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.ILLEGAL_SASL_STATE,
                 KafkaError.UNSUPPORTED_SASL_MECHANISM)
        if err.code() in codes:
            with self._lock:
                if self.failure is None:
                    self.failure = err.str()


def watched_metadata(client: Any, timeout_s: float, address: str, config: Mapping[str, Any],
                     **where: Any) -> Any:
    """``client.list_topics`` within ``timeout_s``; an authentication failure the
    client's :class:`AuthWatch` saw is :class:`AuthenticationFailed` at once."""
    watch = config.get("error_cb")
    if not isinstance(watch, AuthWatch):
        return client.list_topics(timeout=timeout_s)
    waiting = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN, KafkaError._TIMED_OUT)
    deadline = time.monotonic() + timeout_s
    slice_s = FIRST_SLICE_S
    while True:
        left = deadline - time.monotonic()
        try:
            return client.list_topics(timeout=max(0.001, min(slice_s, left)))
        except KafkaException as exc:
            err = exc.args[0] if exc.args and isinstance(exc.args[0], KafkaError) else None
            client.poll(0)  # serves error_cb
            if watch.failure is not None:
                raise login_failed(address, config, watch.failure, **where) from None
            if err is None or err.code() not in waiting or time.monotonic() >= deadline:
                raise
        slice_s = min(slice_s * 2, MAX_SLICE_S)


def login_failed(address: str, config: Mapping[str, Any], failure: str,
                 **where: Any) -> DurableWalError:
    """librdkafka's failed login as a typed error: a token endpoint it could not reach is
    retriable :class:`BackendUnavailable` (as kafka-python's provider reports it), one
    that refused the client names the endpoint and the client id; any other failure is
    :func:`~pyspark_durable.log.kafka.auth.authentication_failed`."""
    if TOKEN_FAILED in failure:
        url = config.get("sasl.oauthbearer.token.endpoint.url")
        said = failure.split(TOKEN_FAILED, 1)[1]
        if any(w in failure for w in ENDPOINT_DOWN):
            return BackendUnavailable(secrets.scrub(
                f"cannot reach the OAuth token endpoint {url}: {said}"), **where)
        if config and protocol_of(config).startswith("SASL") \
                and str(mechanism_of(config)).upper() == "OAUTHBEARER":
            client_id = config.get("sasl.oauthbearer.client.id")
            return login_refused(
                f"the OAuth token endpoint {url} (client id {client_id!r}) refused", said,
                "check kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret, "
                "kafka.sasl.oauthbearer.scope and kafka.sasl.oauthbearer.token.endpoint.url",
                **where)
    return authentication_failed(address, config, failure, **where)
