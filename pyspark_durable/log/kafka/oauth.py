"""SASL/OAUTHBEARER with OAuth2 client credentials: one set of options for both clients.

A user gives librdkafka's names, as text (Spark options are strings)::

    sasl.mechanism=OAUTHBEARER
    sasl.oauthbearer.method=oidc                 (the default once an endpoint is given)
    sasl.oauthbearer.token.endpoint.url=https://idp.example/oauth2/token
    sasl.oauthbearer.client.id=...
    sasl.oauthbearer.client.secret=...           (a secret: redacted like a password)
    sasl.oauthbearer.scope=...                   (optional)

librdkafka fetches and refreshes the tokens itself (its native OIDC, turned on by
:func:`~pyspark_durable.log.kafka.confluent.config.oidc`). kafka-python has no token
fetching, only a ``sasl_oauth_token_provider`` object, which
:mod:`~pyspark_durable.log.kafka.kafka_python.tokens` makes from the same options around
a :class:`ClientCredentials` (kept here, beside :func:`refused_login`, which asks the
same credentials on both clients): a POST of
``grant_type=client_credentials`` with the client id and secret as HTTP Basic
credentials (as librdkafka and Kafka's Java client send them), the token kept until 80 %
of its lifetime has passed (librdkafka's rule), so a re-authentication the broker asks
for near the token's expiry (``connections.max.reauth.ms``) gets a fresh one. One
:class:`ClientCredentials` per endpoint, client and scope in a process: every store
shares its token.

A refusal by the endpoint (HTTP 400, 401, 403: a wrong client secret, an unknown client
or scope) is :class:`~pyspark_durable.errors.AuthenticationFailed`, never retried; an
endpoint that cannot be reached or fails (5xx) is retriable
:class:`~pyspark_durable.errors.BackendUnavailable`. Every token fetched is remembered
as a secret (:func:`pyspark_durable.secrets.remember`), so no log line or error shows it.

A refusal that comes while a store is open (the secret rotated at the endpoint) reaches
neither client's caller: both retry the login until a request times out. So a retriable
failure of an append or a read asks the endpoint once (:func:`refused_login`), with the
same credentials on both clients (:func:`credentials_of`).
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from pyspark_durable import secrets
from pyspark_durable.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    DurableWalError,
)

METHOD = "sasl_oauthbearer_method"
URL = "sasl_oauthbearer_token_endpoint_url"
CLIENT_ID = "sasl_oauthbearer_client_id"
CLIENT_SECRET = "sasl_oauthbearer_client_secret"
SCOPE = "sasl_oauthbearer_scope"
OAUTH_KEYS = frozenset({METHOD, URL, CLIENT_ID, CLIENT_SECRET, SCOPE})
RENEW_AT = 0.8  # of a token's lifetime, as librdkafka
REFUSED_HTTP = (400, 401, 403)
REASK_S = 1.0  # ClientCredentials.refusal's answer is shared this long


def dotted(key: str) -> str:
    return key.replace("_", ".")


class ClientCredentials:
    """OAuth2 client-credentials tokens of one endpoint, client and scope, each kept
    until :data:`RENEW_AT` of its lifetime has passed. Thread-safe."""

    def __init__(self, url: str, client_id: str, secret: str, scope: str | None,
                 timeout_s: float) -> None:
        self.url, self.client_id, self.scope = url, client_id, scope
        self._secret = secret
        self.timeout_s = timeout_s
        self.fetched = 0  # tokens fetched so far
        self._token: str | None = None
        self._renew_at = 0.0
        self._asked_at = -REASK_S  # when refusal() last asked the endpoint
        self._refused: AuthenticationFailed | None = None  # its answer
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # kafka-python logs its configuration: never the secret
        return f"ClientCredentials(url={self.url!r}, client_id={self.client_id!r})"

    def token(self) -> str:
        """A token that has lived less than :data:`RENEW_AT` of its lifetime."""
        with self._lock:
            if self._token is None or time.monotonic() >= self._renew_at:
                self._renew()
            return self._token  # type: ignore[return-value]

    def refusal(self) -> AuthenticationFailed | None:
        """The endpoint's refusal of the client now, returned rather than raised: a new
        token is asked for (and kept). An endpoint that cannot be reached or fails
        refuses nothing: None, as when a token comes. Callers within :data:`REASK_S`
        of an answer share it (the appends of one failed batch fail together)."""
        with self._lock:
            if time.monotonic() - self._asked_at >= REASK_S:
                try:
                    self._renew()
                    self._refused = None
                except AuthenticationFailed as exc:
                    self._refused = exc
                except (BackendUnavailable, ConfigError):
                    self._refused = None
                self._asked_at = time.monotonic()
            return self._refused

    def _renew(self) -> None:
        started = time.monotonic()
        token, lifetime_s = self._fetch()
        self._token, self._renew_at = token, started + RENEW_AT * lifetime_s
        self.fetched += 1

    def _where(self) -> str:
        return f"the OAuth token endpoint {self.url} (client id {self.client_id!r})"

    def _fetch(self) -> tuple[str, float]:
        form = {"grant_type": "client_credentials", **({"scope": self.scope} if self.scope else {})}
        basic = base64.b64encode(f"{self.client_id}:{self._secret}".encode()).decode()
        request = urllib.request.Request(
            self.url, data=urllib.parse.urlencode(form).encode(), method="POST",
            headers={"Authorization": f"Basic {basic}", "Accept": "application/json",
                     "Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            raise self._http_error(exc) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BackendUnavailable(f"cannot reach {self._where()}: {reason}") from None
        return self._parse(body)

    def _http_error(self, exc: urllib.error.HTTPError) -> Exception:
        try:
            error = str(json.loads(exc.read() or b"{}").get("error") or "")
        except (ValueError, AttributeError, OSError):
            error = ""
        said = f"HTTP {exc.code}" + (f" {error}" if error else "")
        if exc.code in REFUSED_HTTP:
            return AuthenticationFailed(secrets.scrub(
                f"{self._where()} refused the client id and secret ({said}); check "
                "kafka.sasl.oauthbearer.client.id, kafka.sasl.oauthbearer.client.secret and "
                "kafka.sasl.oauthbearer.scope (not retried)", [self._secret]))
        return BackendUnavailable(secrets.scrub(f"{self._where()} failed ({said})",
                                                [self._secret]))

    def _parse(self, body: bytes) -> tuple[str, float]:
        """The access token and its lifetime (``expires_in``, else the JWT's ``exp``)."""
        try:
            answer = json.loads(body)
            token = str(answer["access_token"])
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{self._where()} answered with no access_token; check "
                              "kafka.sasl.oauthbearer.token.endpoint.url") from None
        secrets.remember({"access_token": token})
        lifetime = answer.get("expires_in")
        if lifetime is None:
            lifetime = _jwt_expiry(token) - time.time()
        try:
            return token, max(1.0, float(lifetime))
        except (TypeError, ValueError):
            raise ConfigError(f"{self._where()} gave no token lifetime (expires_in, or a "
                              "JWT's exp)") from None


def _jwt_expiry(token: str) -> float:
    """A JWT's ``exp`` (its signature is the broker's to check); NaN if it has none."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return float(claims["exp"])
    except (IndexError, ValueError, KeyError, TypeError):
        return float("nan")


_shared: dict[tuple[str, str, str, str | None], ClientCredentials] = {}
_shared_lock = threading.Lock()


def client_credentials(url: str, client_id: str, secret: str, scope: str | None,
                       timeout_s: float) -> ClientCredentials:
    """The process's :class:`ClientCredentials` of this endpoint, client and scope."""
    key = (url, client_id, secret, scope)
    with _shared_lock:
        tokens = _shared.get(key)
        if tokens is None:
            tokens = _shared[key] = ClientCredentials(url, client_id, secret, scope, timeout_s)
        return tokens


def credentials_of(config: Mapping[str, Any], timeout_s: float) -> ClientCredentials | None:
    """The :class:`ClientCredentials` a client's config logs in with: kafka-python's token
    provider's, or those of librdkafka's OIDC properties; None without a token endpoint."""
    tokens = getattr(config.get("sasl_oauth_token_provider"), "tokens", None)
    if isinstance(tokens, ClientCredentials):
        return tokens
    url = config.get(dotted(URL))
    if not url or not is_oauth(config) \
            or str(config.get(dotted(METHOD)) or "oidc").lower() != "oidc":
        return None
    return client_credentials(str(url), str(config.get(dotted(CLIENT_ID)) or ""),
                              str(config.get(dotted(CLIENT_SECRET)) or ""),
                              config.get(dotted(SCOPE)) or None, timeout_s)


def refused_login(exc: DurableWalError, config: Mapping[str, Any], timeout_s: float,
                  what: str, **where: Any) -> DurableWalError:
    """``exc``, a client's failure, as :class:`AuthenticationFailed` when it may hide a
    refused login: it is retriable (neither client tells a refused token request from a
    broker that does not answer: both retry the login until their request times out),
    the config logs in with an OAuth token endpoint, and that endpoint, asked once
    now, refuses the client (its secret rotated or revoked). Else ``exc`` as it is."""
    if not isinstance(exc, BackendUnavailable):
        return exc
    tokens = credentials_of(config, timeout_s)
    refusal = None if tokens is None else tokens.refusal()
    if refusal is None:
        return exc
    return AuthenticationFailed(f"{what}: {refusal.reason}", **where)


def is_oauth(config: Mapping[str, Any]) -> bool:
    mechanism = config.get("sasl_mechanism") or config.get("sasl.mechanism") \
        or config.get("sasl.mechanisms")
    return str(mechanism or "").upper() == "OAUTHBEARER"
