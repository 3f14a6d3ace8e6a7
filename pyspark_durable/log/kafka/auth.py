"""Authentication of the Kafka log: security options, and a wrong password told quickly.

**Options.** A user writes Kafka's own names (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` as in Spark's Kafka connector
or a ``--command-config`` file) or kafka-python's (``kafka.sasl.plain.username``,
``kafka.ssl.cafile``). :func:`security_options` runs before the backend parses
options: it records the secrets for redaction (:mod:`pyspark_durable.secrets`),
turns a ``sasl.jaas.config`` of the PLAIN or SCRAM login module into user name and
password, and one of OAuthBearerLoginModule (a Java client's OAUTHBEARER: clientId,
clientSecret, scope) into the ``sasl.oauthbearer.*`` options (neither client reads
JAAS), and for librdkafka turns kafka-python's
``ssl_check_hostname`` into ``ssl.endpoint.identification.algorithm``. The other
renames are :data:`~pyspark_durable.log.kafka.librdkafka.ALIASES`.

**A wrong password** is :class:`~pyspark_durable.errors.AuthenticationFailed`, raised
when the store opens, within about a second, not after ``connect_timeout_ms``:

* librdkafka reports a failed SASL exchange only through its ``error_cb`` and keeps
  retrying, so a metadata request just times out. The admin client gets an
  :class:`AuthWatch` as ``error_cb``; :func:`rd_list_topics` asks for metadata in
  short, growing slices and polls the watch between them.
* kafka-python's bootstrap retries any failed connection until its timeout, and
  3.0.12 loses the broker's SaslAuthenticate error when the broker closes the
  connection right after it (the bytes and the EOF arrive in one read), so the
  failure looks like "socket disconnected". :func:`py_check_credentials` makes one
  connection first (only when SASL or TLS is configured): a connection that answered
  ApiVersions and then closed during the SASL exchange is a refused login.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from pyspark_durable import secrets
from pyspark_durable.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    DurableWalError,
)
from pyspark_durable.log.kafka.spelling import normalize_key

FIRST_SLICE_S = 0.5  # first metadata wait; doubled up to MAX_SLICE_S
MAX_SLICE_S = 4.0
LOGIN_MODULES = {"plainloginmodule": "PLAIN", "scramloginmodule": None,
                 "oauthbearerloginmodule": "OAUTHBEARER"}
# OAuthBearerLoginModule's options (Kafka's OAuthBearerLoginCallbackHandler) and ours
OAUTH_JAAS = {"clientid": "sasl_oauthbearer_client_id",
              "clientsecret": "sasl_oauthbearer_client_secret",
              "scope": "sasl_oauthbearer_scope"}
OAUTH_HANDLER = "OAuthBearerLoginCallbackHandler"  # Kafka's client-credentials login
OAUTH_HANDLER_PACKAGES = ("org.apache.kafka.common.security.oauthbearer",
                          "org.apache.kafka.common.security.oauthbearer.secured")  # 3.x


def security_options(options: Mapping[str, Any], client: str) -> dict[str, Any]:
    """The options with JAAS and ``ssl_check_hostname`` translated (see the module
    docstring); their secrets remembered for redaction."""
    secrets.remember(options)
    out = dict(options)
    names = {normalize_key(k): k for k in out}
    jaas_key = names.get("sasl_jaas_config")
    if jaas_key is not None and out[jaas_key] is not None:
        _translate_jaas(out, names, jaas_key, client)
    check_key = names.get("ssl_check_hostname")
    if client == "confluent" and check_key is not None:
        value = out.pop(check_key)
        on = str(value).strip().lower() not in ("false", "0", "no", "none")
        out["ssl_endpoint_identification_algorithm"] = "https" if on else "none"
    return out


def _translate_jaas(out: dict[str, Any], names: Mapping[str, str], jaas_key: str,
                    client: str) -> None:
    """``out``'s JAAS line (popped) as the options of its login module."""
    text = str(out.pop(jaas_key))
    head = text.strip().split(None, 1)[0].lower() if text.strip() else ""
    module = next((m for m in LOGIN_MODULES if head.endswith(m)), None)
    if module is None:
        # never "option 'x': ...": the text after a secret key and a colon is masked
        raise ConfigError(f"option {jaas_key!r} names a login module that cannot be "
                          "translated: only the PLAIN, SCRAM and OAuthBearer login "
                          "modules can (give sasl.plain.username and "
                          "sasl.plain.password, the sasl.oauthbearer.* options, or "
                          "librdkafka's sasl.* properties)")
    if module == "oauthbearerloginmodule":
        _oauth_jaas(out, names, jaas_key, text)
    else:
        found = secrets.jaas_values(text)
        for name, key in (("username", "sasl_plain_username"),
                          ("password", "sasl_plain_password")):
            if name in found and key not in names and not (
                    client == "confluent" and key.replace("plain_", "") in names):
                out[key] = found[name]
    if LOGIN_MODULES[module] and "sasl_mechanism" not in names \
            and "sasl_mechanisms" not in names:
        out["sasl_mechanism"] = LOGIN_MODULES[module]


def _oauth_jaas(out: dict[str, Any], names: Mapping[str, str], jaas_key: str,
                text: str) -> None:
    """OAuthBearerLoginModule's clientId, clientSecret and scope as the
    ``sasl.oauthbearer.*`` options (an option given as such wins); the token endpoint
    is Kafka's own option, ``sasl.oauthbearer.token.endpoint.url``. Options of the
    module other than those three are refused by name, never by value."""
    found = secrets.jaas_options(text)[1]
    unknown = sorted(k for k in found if k.lower() not in OAUTH_JAAS)
    if unknown:
        raise ConfigError(f"option {jaas_key!r} gives OAuthBearerLoginModule option(s) "
                          f"{', '.join(unknown)}, not supported (supported: clientId, "
                          "clientSecret, scope)")
    handler_key = names.get("sasl_login_callback_handler_class")
    if handler_key is not None:
        handler = str(out.pop(handler_key) or "").strip()
        package, _, name = handler.rpartition(".")
        if name != OAUTH_HANDLER or package not in OAUTH_HANDLER_PACKAGES:
            raise ConfigError(f"option {handler_key}={handler!r}: only Kafka's {OAUTH_HANDLER} "
                              "(client credentials from a token endpoint) can be translated")
    if not out.get(names.get("sasl_oauthbearer_token_endpoint_url", "")):
        raise ConfigError(f"option {jaas_key!r} with OAuthBearerLoginModule needs "
                          "sasl.oauthbearer.token.endpoint.url (the OAuth token endpoint)")
    given = {k.lower(): v for k, v in found.items()}
    for name, key in OAUTH_JAAS.items():
        if given.get(name) and key not in names:
            out[key] = given[name]
    missing = [n for n, k in OAUTH_JAAS.items() if n != "scope" and not out.get(names.get(k, k))]
    if missing:
        raise ConfigError(f"OAuthBearerLoginModule in option {jaas_key!r} needs "
                          f"{' and '.join(OAUTH_NAMES[n] for n in missing)}")
    out.setdefault(names.get("sasl_oauthbearer_method", "sasl_oauthbearer_method"), "oidc")


OAUTH_NAMES = {"clientid": "clientId", "clientsecret": "clientSecret"}


def mechanism_of(config: Mapping[str, Any]) -> str | None:
    """The SASL mechanism of a client config (either client's spelling)."""
    for key in ("sasl_mechanism", "sasl.mechanism", "sasl.mechanisms"):
        if config.get(key):
            return str(config[key])
    return None


def protocol_of(config: Mapping[str, Any]) -> str:
    return str(config.get("security_protocol") or config.get("security.protocol")
               or "PLAINTEXT").upper()


def authentication_failed(address: str, config: Mapping[str, Any], detail: str,
                          **where: Any) -> AuthenticationFailed:
    """The typed error: broker, protocol and mechanism named, the secret never."""
    protocol = protocol_of(config)
    mechanism = mechanism_of(config)
    if not config:  # a client's error met later, without the options at hand
        what = f"authentication to Kafka broker {address} failed"
        fix = "check the kafka.sasl.* and kafka.ssl.* options"
    elif protocol.startswith("SASL") and str(mechanism).upper() == "OAUTHBEARER":
        what, detail, fix = _oauth_failure(address, protocol, config, detail)
    elif protocol.startswith("SASL"):
        what = (f"SASL authentication (mechanism {mechanism or 'GSSAPI'}, security.protocol "
                f"{protocol}) to Kafka broker {address} failed")
        fix = ("check the user name and password (kafka.sasl.plain.username / "
               "kafka.sasl.plain.password, or kafka.sasl.jaas.config) and the mechanism")
    else:
        what = f"TLS connection (security.protocol {protocol}) to Kafka broker {address} failed"
        fix = "check kafka.ssl.cafile (the CA that signed the broker's certificate)"
    return AuthenticationFailed(f"{what}: {secrets.scrub(detail)}; {fix} (not retried)",
                                **where)


RD_TOKEN_FAILED = "Failed to acquire SASL OAUTHBEARER token: "  # librdkafka's OIDC fetch
# libcurl's words, in librdkafka's failure, for an endpoint it could not reach
RD_ENDPOINT_DOWN = ("Failed to connect", "Could not connect", "Could not resolve",
                    "Timeout was reached")


def rd_login_failed(address: str, config: Mapping[str, Any], failure: str,
                    **where: Any) -> DurableWalError:
    """librdkafka's failed login as a typed error: a token endpoint it could not reach is
    retriable :class:`BackendUnavailable` (as kafka-python's provider reports it); any
    other failure is :func:`authentication_failed`."""
    if RD_TOKEN_FAILED in failure and any(w in failure for w in RD_ENDPOINT_DOWN):
        url = config.get("sasl.oauthbearer.token.endpoint.url")
        return BackendUnavailable(secrets.scrub(
            f"cannot reach the OAuth token endpoint {url}: "
            f"{failure.split(RD_TOKEN_FAILED, 1)[1]}"), **where)
    return authentication_failed(address, config, failure, **where)


def _oauth_failure(address: str, protocol: str, config: Mapping[str, Any],
                   detail: str) -> tuple[str, str, str]:
    """What failed, the client's words and the fix, for OAUTHBEARER: the token endpoint
    gave no token (librdkafka's OIDC), or the broker refused the token."""
    if RD_TOKEN_FAILED in detail:
        url = config.get("sasl.oauthbearer.token.endpoint.url")
        client_id = config.get("sasl.oauthbearer.client.id")
        return (f"the OAuth token endpoint {url} (client id {client_id!r}) refused",
                detail.split(RD_TOKEN_FAILED, 1)[1],
                "check kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret, "
                "kafka.sasl.oauthbearer.scope and kafka.sasl.oauthbearer.token.endpoint.url")
    return (f"SASL/OAUTHBEARER authentication (security.protocol {protocol}) to Kafka broker "
            f"{address} failed", detail,
            "the broker refused the token; check that its issuer, audience and signing key "
            "are the ones the broker expects (its sasl.oauthbearer.expected.audience, "
            "expected.issuer, jwks.endpoint.url) and kafka.sasl.oauthbearer.scope")


# -- librdkafka ------------------------------------------------------------------------


class AuthWatch:
    """A librdkafka ``error_cb``: keeps the first authentication or TLS failure."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self._lock = threading.Lock()

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        codes = (KafkaError._AUTHENTICATION, KafkaError._SSL,
                 KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError.ILLEGAL_SASL_STATE,
                 KafkaError.UNSUPPORTED_SASL_MECHANISM)
        if err.code() in codes:
            with self._lock:
                if self.failure is None:
                    self.failure = err.str()


def rd_list_topics(client: Any, timeout_s: float, address: str, config: Mapping[str, Any],
                   **where: Any) -> Any:
    """``client.list_topics`` within ``timeout_s``; an authentication failure the
    client's :class:`AuthWatch` saw is :class:`AuthenticationFailed` at once."""
    from confluent_kafka import KafkaError, KafkaException

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
                raise rd_login_failed(address, config, watch.failure, **where) from None
            if err is None or err.code() not in waiting or time.monotonic() >= deadline:
                raise
        slice_s = min(slice_s * 2, MAX_SLICE_S)


# -- kafka-python ----------------------------------------------------------------------


def py_check_credentials(config: Mapping[str, Any], address: str, timeout_ms: int,
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
    import kafka.errors as kerr
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

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
