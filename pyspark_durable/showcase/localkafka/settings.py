"""A node's ``server.properties``: its listeners (PLAINTEXT, and SASL, TLS or a
proxied INTERNAL one when asked), the SASL mechanisms and OAUTHBEARER validation, and
the replication a cluster of its size needs."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pyspark_durable.showcase.localkafka.node import BrokerStartError, Node


@dataclass
class OAuthValidation:
    """How the SASL listener's OAUTHBEARER checks a token: Kafka's
    ``OAuthBearerValidatorCallbackHandler``, RS256 signatures against the keys at
    ``jwks_url``, and the ``iss`` and ``aud`` claims. ``reauth_ms`` is the longest session
    before the client must log in again (``connections.max.reauth.ms``): a session ends
    at its token's expiry anyway, so a client must fetch a new token to go on.
    ``clock_skew_s`` is how long past its expiry a token is still taken for a login
    (Kafka's default is 30 s; ``exp`` is in whole seconds, and a client refreshing at 80 %
    of a token's life that lives seconds may log in with it right at its expiry)."""

    jwks_url: str
    issuer: str
    audience: str
    reauth_ms: int = 600_000
    clock_skew_s: int = 2


@dataclass
class Auth:
    """Credentials and files of the SASL and TLS listeners."""

    admin_user: str = "admin"
    admin_password: str = field(default_factory=lambda: "adm-" + uuid.uuid4().hex)
    user: str = "alice"
    password: str = field(default_factory=lambda: "pw-" + uuid.uuid4().hex)
    tls_dir: Path | None = None  # ca.pem, server keystore (PKCS12) and its password
    keystore_password: str = field(default_factory=lambda: "ks-" + uuid.uuid4().hex)
    # more SASL/PLAIN users (name -> password), e.g. one per role of an authorizer's test
    plain_users: dict[str, str] = field(default_factory=dict)
    oauth: OAuthValidation | None = None  # adds OAUTHBEARER to the SASL listener

    def plain_logins(self) -> dict[str, str]:
        """Every SASL/PLAIN user of the listener: the user, the admin and the others."""
        return {self.user: self.password, self.admin_user: self.admin_password, **self.plain_users}


SCRAM_LOGIN = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_LOGIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
OAUTH_PACKAGE = "org.apache.kafka.common.security.oauthbearer"
# Kafka 4 fetches a JWKS only from URLs this JVM property lists
OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"


def _oauth_properties(listener: str, oauth: OAuthValidation) -> dict[str, str]:
    return {
        f"{listener}.oauthbearer.sasl.jaas.config": f"{OAUTH_PACKAGE}.OAuthBearerLoginModule required;",
        f"{listener}.oauthbearer.sasl.server.callback.handler.class":
            f"{OAUTH_PACKAGE}.OAuthBearerValidatorCallbackHandler",
        f"{listener}.oauthbearer.connections.max.reauth.ms": str(oauth.reauth_ms),
        "sasl.oauthbearer.jwks.endpoint.url": oauth.jwks_url,
        "sasl.oauthbearer.expected.issuer": oauth.issuer,
        "sasl.oauthbearer.expected.audience": oauth.audience,
        "sasl.oauthbearer.clock.skew.seconds": str(oauth.clock_skew_s),
    }


def jvm_options(auth: Auth | None) -> tuple[str, ...]:
    """The JVM flags a node's settings need beyond ``server.properties``: the JWKS URL
    OAUTHBEARER validation may fetch from."""
    if auth is None or auth.oauth is None:
        return ()
    return (f"-D{OAUTH_ALLOWED_URLS}={auth.oauth.jwks_url}",)


def _sasl_properties(node: Node, auth: Auth) -> dict[str, str]:
    listener = "listener.name.sasl_plaintext"
    oauth = {} if auth.oauth is None else _oauth_properties(listener, auth.oauth)
    return {
        **oauth,
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,PLAIN" + (",OAUTHBEARER" if oauth else ""),
        f"{listener}.scram-sha-256.sasl.jaas.config": f"{SCRAM_LOGIN} required;",
        f"{listener}.plain.sasl.jaas.config": (
            f"{PLAIN_LOGIN} required "
            + " ".join(f'user_{name}="{secret}"' for name, secret in auth.plain_logins().items())
            + ";"
        ),
    }


def _tls_properties(auth: Auth) -> dict[str, str]:
    if auth.tls_dir is None:
        raise BrokerStartError("a TLS listener needs auth.tls_dir (its server.p12 keystore)")
    return {
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": str(auth.tls_dir / "server.p12"),
        "ssl.keystore.password": auth.keystore_password,
        "ssl.key.password": auth.keystore_password,
        "ssl.client.auth": "none",
    }


def properties(node: Node, voters: str, size: int, auth: Auth | None, extra: Mapping[str, str]) -> str:
    """``server.properties`` of one node."""
    listeners = [f"PLAINTEXT://127.0.0.1:{node.port}"]
    advertised = [f"PLAINTEXT://{node.client_address}"]
    protocols = ["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT"]
    inter_broker = "PLAINTEXT"
    props: dict[str, str] = {}
    if node.internal_port is not None:  # clients go through a proxy, the nodes do not
        inter_broker = "INTERNAL"
        listeners.append(f"INTERNAL://127.0.0.1:{node.internal_port}")
        advertised.append(f"INTERNAL://127.0.0.1:{node.internal_port}")
        protocols.append("INTERNAL:PLAINTEXT")
    if node.sasl_port is not None and auth is not None:
        listeners.append(f"SASL_PLAINTEXT://127.0.0.1:{node.sasl_port}")
        advertised.append(listeners[-1])
        protocols.append("SASL_PLAINTEXT:SASL_PLAINTEXT")
        props.update(_sasl_properties(node, auth))
    if node.ssl_port is not None and auth is not None:
        listeners.append(f"SSL://127.0.0.1:{node.ssl_port}")
        advertised.append(listeners[-1])
        protocols.append("SSL:SSL")
        props.update(_tls_properties(auth))
    replication = str(min(size, 3))
    base = {
        "process.roles": "broker,controller",
        "node.id": str(node.node_id),
        "controller.quorum.voters": voters,
        "listeners": ",".join([*listeners, f"CONTROLLER://127.0.0.1:{node.controller_port}"]),
        "advertised.listeners": ",".join(advertised),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": inter_broker,
        "listener.security.protocol.map": ",".join(protocols),
        "log.dirs": str(node.folder / "data"),
        "offsets.topic.replication.factor": replication,
        "transaction.state.log.replication.factor": replication,
        "transaction.state.log.min.isr": "1" if size == 1 else "2",
        "share.coordinator.state.topic.replication.factor": replication,
        "share.coordinator.state.topic.min.isr": "1" if size == 1 else "2",
        "group.initial.rebalance.delay.ms": "0",
    }
    if size > 1:
        base["default.replication.factor"] = replication
        base["min.insync.replicas"] = "2"
    lines = {**base, **props, **dict(extra)}
    return "".join(f"{k}={v}\n" for k, v in lines.items())
