"""OAUTHBEARER tokens for kafka-python: its ``sasl_oauth_token_provider`` made from the
``sasl.oauthbearer.*`` options both clients take.

kafka-python fetches no token itself; it asks a provider object at every login. So the
options are taken out of its kwargs (:func:`tokens_of`) and the tokens come from the
process's shared :class:`~pyspark_durable.log.kafka.oauth.ClientCredentials` of that
endpoint, client and scope, through a :class:`TokenProvider`.
"""

from __future__ import annotations

import urllib.parse
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.oauth import (
    CLIENT_ID,
    CLIENT_SECRET,
    METHOD,
    OAUTH_KEYS,
    SCOPE,
    URL,
    ClientCredentials,
    client_credentials,
    dotted,
)


class TokenProvider(AbstractTokenProvider):
    """kafka-python's ``sasl_oauth_token_provider``: the tokens of one
    :class:`~pyspark_durable.log.kafka.oauth.ClientCredentials`."""

    def __init__(self, tokens: ClientCredentials) -> None:
        super().__init__()
        self.tokens = tokens

    def __repr__(self) -> str:
        return f"TokenProvider({self.tokens!r})"

    def token(self) -> str:
        return self.tokens.token()


def tokens_of(options: dict[str, Any], timeout_s: float) -> ClientCredentials | None:
    """Take the OAuth options out of ``options`` (kafka-python's one spelling) and return
    their :class:`ClientCredentials`; None when none is given."""
    given = {k: options.pop(k) for k in OAUTH_KEYS & set(options)}
    if not given:
        return None
    method = str(given.get(METHOD, "oidc")).strip().lower()
    if method != "oidc":
        raise ConfigError(f"option {dotted(METHOD)}={given[METHOD]!r}: kafka-python supports "
                          "only 'oidc' (tokens from sasl.oauthbearer.token.endpoint.url)")
    missing = [dotted(k) for k in (URL, CLIENT_ID, CLIENT_SECRET) if not given.get(k)]
    if missing:
        raise ConfigError(f"OAUTHBEARER with an OAuth token endpoint needs {', '.join(missing)}")
    if options.get("sasl_oauth_token_provider") is not None:
        raise ConfigError("give either sasl_oauth_token_provider or the "
                          "sasl.oauthbearer.* options, not both")
    url = str(given[URL])
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise ConfigError(f"option {dotted(URL)}={url!r} is not an http(s) URL")
    scope = str(given[SCOPE]) if given.get(SCOPE) else None
    return client_credentials(url, str(given[CLIENT_ID]), str(given[CLIENT_SECRET]), scope,
                              timeout_s)


def librdkafka_oidc(props: dict[str, Any]) -> None:
    """librdkafka's native OIDC: ``sasl.oauthbearer.method=oidc`` once a token endpoint is
    given (its default method builds unsigned test tokens)."""
    if props.get(dotted(URL)) and not props.get(dotted(METHOD)):
        props[dotted(METHOD)] = "oidc"
