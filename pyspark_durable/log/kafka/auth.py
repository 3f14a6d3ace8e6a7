"""Authentication of the Kafka log: security options, and a refused login as one typed error.

**Options.** A user writes Kafka's own names (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` as in Spark's Kafka connector
or a ``--command-config`` file) or kafka-python's (``kafka.sasl.plain.username``,
``kafka.ssl.cafile``). :func:`security_options` runs before the backend parses
options: it records the secrets for redaction (:mod:`pyspark_durable.secrets`),
turns a ``sasl.jaas.config`` of the PLAIN or SCRAM login module into user name and
password, and one of OAuthBearerLoginModule (a Java client's OAUTHBEARER: clientId,
clientSecret, scope) into the ``sasl.oauthbearer.*`` options (neither client reads
JAAS), and for librdkafka turns kafka-python's
``ssl_check_hostname`` into ``ssl.endpoint.identification.algorithm``. It runs before
the chosen client sees the options, so it knows the two spellings it must not
overwrite; the other renames are the confluent client's
(:data:`~pyspark_durable.log.kafka.confluent.config.ALIASES`).

**A wrong password** is :class:`~pyspark_durable.errors.AuthenticationFailed`
(:func:`authentication_failed`: broker, protocol and mechanism named, the secret
never), raised when the store opens, within about a second, not after
``connect_timeout_ms``. Neither client tells it that quickly by itself; each client's
``login`` module does: :mod:`~pyspark_durable.log.kafka.confluent.login` watches
librdkafka's ``error_cb``, :mod:`~pyspark_durable.log.kafka.kafka_python.login` makes
one connection with kafka-python's own connection code first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyspark_durable import secrets
from pyspark_durable.errors import (
    AuthenticationFailed,
    ConfigError,
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
        what, fix = _oauth_failure(address, protocol)
    elif protocol.startswith("SASL"):
        what = (f"SASL authentication (mechanism {mechanism or 'GSSAPI'}, security.protocol "
                f"{protocol}) to Kafka broker {address} failed")
        fix = ("check the user name and password (kafka.sasl.plain.username / "
               "kafka.sasl.plain.password, or kafka.sasl.jaas.config) and the mechanism")
    else:
        what = f"TLS connection (security.protocol {protocol}) to Kafka broker {address} failed"
        fix = "check kafka.ssl.cafile (the CA that signed the broker's certificate)"
    return login_refused(what, detail, fix, **where)


def login_refused(what: str, detail: str, fix: str, **where: Any) -> AuthenticationFailed:
    """The typed error of a refused login: what failed, the client's words (secrets
    scrubbed) and the fix; never retried, as the same login is refused again."""
    return AuthenticationFailed(f"{what}: {secrets.scrub(detail)}; {fix} (not retried)",
                                **where)


def _oauth_failure(address: str, protocol: str) -> tuple[str, str]:
    """What failed and the fix, for OAUTHBEARER: the broker refused the token. (A token
    endpoint that refused the client is told where the token is fetched: by
    :class:`~pyspark_durable.log.kafka.oauth.ClientCredentials`, or by librdkafka, whose
    words :func:`~pyspark_durable.log.kafka.confluent.login.login_failed` reads.)"""
    return (f"SASL/OAUTHBEARER authentication (security.protocol {protocol}) to Kafka broker "
            f"{address} failed",
            "the broker refused the token; check that its issuer, audience and signing key "
            "are the ones the broker expects (its sasl.oauthbearer.expected.audience, "
            "expected.issuer, jwks.endpoint.url) and kafka.sasl.oauthbearer.scope")
