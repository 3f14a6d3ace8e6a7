"""SASL/OAUTHBEARER: tokens from an OAuth2 client-credentials endpoint, checked by the broker.

One token endpoint (:mod:`oauth_server`, RS256 JWTs and their JWKS on 127.0.0.1) and one
broker for the module, whose SASL listener takes OAUTHBEARER through Kafka's own
``OAuthBearerValidatorCallbackHandler`` (signature against the JWKS, issuer, audience,
expiry with no clock skew; a session lasts no longer than its token). Both clients read
and write with the same options (librdkafka's native OIDC; a token provider for
kafka-python) from the Python API, the CLI and Spark; a short-lived token is refreshed
under a long-lived handle; a refused token or client secret is a typed error, also
when the secret is rotated at the endpoint under an open handle; and no
token or client secret shows in errors, logs, CLI output or the WAL's topics.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from pyspark_durable.endpoint import open_namespace, write_step
from pyspark_durable.errors import AuthenticationFailed, BackendUnavailable, DurableWalError
from pyspark_durable.log import Record, open_store
from pyspark_durable.secrets import REDACTED
from pyspark_durable.showcase.localkafka.settings import OAuthValidation
from tests.kafka_broker import Auth, KafkaCluster, cluster_for_tests, free_port, topic_bytes
from tests.oauth_server import Client, TokenServer

pytestmark = pytest.mark.kafka

ISSUER, AUDIENCE, SCOPE = "https://idp.test/", "durablewal-kafka", "kafka"
SHORT_S = 5  # the short-lived client's token lifetime
SKEW_S = 2  # the broker takes a token this long past its expiry
REFRESHES = 3  # expiries a long-lived handle must outlive
QUICK_S = 10.0  # a refusal is told well before the 30 s connect timeout given
TESTS = Path(__file__).resolve().parents[2]


def secret_for(name: str) -> str:
    return f"cs-{name}-{uuid.uuid4().hex}"


PROFILES = {"app": Client(secret_for("app")),
            "short": Client(secret_for("short"), lifetime_s=SHORT_S),
            "jaas": Client(secret_for("jaas")),
            "rotated-confluent": Client(secret_for("rot"), lifetime_s=SHORT_S),
            "rotated-kafka-python": Client(secret_for("rot"), lifetime_s=SHORT_S),
            "other-audience": Client(secret_for("aud"), audience="someone-else"),
            "foreign-key": Client(secret_for("key"), foreign_key=True)}


@pytest.fixture(scope="module")
def tokens() -> Iterator[TokenServer]:
    server = TokenServer(PROFILES, ISSUER, AUDIENCE)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def cluster(tokens: TokenServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Kafka node whose SASL listener validates the token server's JWTs."""
    auth = Auth(oauth=OAuthValidation(f"{tokens.url}/jwks", ISSUER, AUDIENCE,
                                      clock_skew_s=SKEW_S))
    with cluster_for_tests(tmp_path_factory.mktemp("kafka-oauth"), 1, sasl=True,
                           auth=auth) as broker:
        yield broker


def oauth_options(cluster: KafkaCluster, tokens: TokenServer, client_id: str = "app",
                  secret: str | None = None, **more: str) -> dict[str, str]:
    """The options a user gives, as Spark passes them (strings, Kafka's dotted names)."""
    return {"kafka.bootstrap.servers": cluster.sasl_bootstrap(),
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
            "kafka.sasl.oauthbearer.method": "oidc",
            "kafka.sasl.oauthbearer.token.endpoint.url": f"{tokens.url}/token",
            "kafka.sasl.oauthbearer.client.id": client_id,
            "kafka.sasl.oauthbearer.client.secret":
                PROFILES[client_id].secret if secret is None else secret,
            "kafka.sasl.oauthbearer.scope": SCOPE, **more}


def assert_nothing_shows(tokens: TokenServer, text: str | bytes, where: str) -> None:
    """No client secret and no token issued so far is in ``text``."""
    needles = [p.secret for p in PROFILES.values()] + [i.token for i in tokens.tokens()]
    for needle in needles:
        assert (needle.encode() if isinstance(text, bytes) else needle) not in text, \
            f"a secret or token shows in {where}"


def roundtrip(options: dict[str, str]) -> str:
    """Append to a log and a snapshot, read both back through a fresh store."""
    ns = f"o{uuid.uuid4().hex[:10]}"
    store = open_store("kafka", ns, **options)
    try:
        assert store.open_log("region_0").append([Record(b"k", b"v1"), Record(b"k", b"v2")]) == [0, 1]
        store.write_snapshot("state", 1, b"snap")
    finally:
        store.close()
    again = open_store("kafka", ns, **options)
    try:
        assert [e.value for e in again.open_log("region_0", create=False).read(0)] == [b"v1", b"v2"]
        assert again.read_snapshot_version("state", 1) == b"snap"
    finally:
        again.close()
    return ns


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_both_clients_read_and_write_through_oauthbearer(cluster, tokens, client, caplog):
    """This tests that a WAL is written and read over SASL/OAUTHBEARER with tokens from the
    client-credentials endpoint, from the same options on both clients, and that no token
    or client secret is in any log record at DEBUG or in the bytes of the WAL's topics."""
    caplog.set_level(logging.DEBUG)
    for name in ("kafka", "pyspark_durable", "confluent_kafka"):
        caplog.set_level(logging.DEBUG, logger=name)
    before = len(tokens.tokens("app"))
    options = {**oauth_options(cluster, tokens), "kafka.client": client}
    roundtrip(options)
    ns_name = f"w{uuid.uuid4().hex[:10]}"
    ns = open_namespace({"backend": "kafka", "namespace": ns_name, "options": options})
    try:
        for step in range(3):
            write_step(ns, "writer", step, {"orders": pa.table({"id": [step, step + 1]})})
    finally:
        ns.close()
    assert len(tokens.tokens("app")) > before, "no token was fetched from the endpoint"
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert_nothing_shows(tokens, text, "the log records")
    assert_nothing_shows(tokens, topic_bytes(cluster, ns_name), "the WAL's topics")


JAAS_HANDLERS = {  # Kafka 4's login callback handler, and 3.x's
    "confluent": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
    "kafka-python":
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
}


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_java_clients_jaas_configuration_logs_in_with_oauthbearer(cluster, tokens, client):
    """This tests that a Java client's OAUTHBEARER configuration (an
    OAuthBearerLoginModule JAAS line with clientId, clientSecret and scope, the token
    endpoint URL and Kafka's login callback handler) writes and reads a WAL on both
    clients, with tokens fetched for that client id."""
    secret = PROFILES["jaas"].secret  # its own client: kafka-python's tokens are shared
    options = {"kafka.bootstrap.servers": cluster.sasl_bootstrap(), "kafka.client": client,
               "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "OAUTHBEARER",
               "kafka.sasl.oauthbearer.token.endpoint.url": f"{tokens.url}/token",
               "kafka.sasl.login.callback.handler.class": JAAS_HANDLERS[client],
               "kafka.sasl.jaas.config":
                   "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                   f'required clientId="jaas" clientSecret="{secret}" scope="{SCOPE}";'}
    before = len(tokens.tokens("jaas"))
    roundtrip(options)
    assert len(tokens.tokens("jaas")) > before, "no token was fetched for the JAAS client id"


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_expired_token_is_refreshed_under_a_long_lived_handle(cluster, tokens, client):
    """This tests that a store kept open past several expiries of its 5-second tokens goes
    on appending and reading: once every token issued so far is past its expiry and the
    broker's clock skew (the broker ends a session at its token's expiry), each round
    succeeds on a token fetched since."""
    store = open_store("kafka", f"r{uuid.uuid4().hex[:10]}",
                       **oauth_options(cluster, tokens, "short"), client=client)
    try:
        log = store.open_log("region_0")
        first = len(tokens.tokens("short"))
        for round_ in range(REFRESHES):
            expired = max(i.expires for i in tokens.tokens("short"))
            # no event tells that a token expired: a wait bounded by its lifetime and the skew
            time.sleep(max(0.0, expired + SKEW_S + 0.5 - time.time()))
            assert log.append([Record(b"k", b"r%d" % round_)]) == [round_]
            assert [e.value for e in log.read(round_)] == [b"r%d" % round_]
        refreshed = len(tokens.tokens("short")) - first
        print(f"{client}: {refreshed} tokens fetched over {REFRESHES} expiries")
        assert refreshed >= REFRESHES
    finally:
        store.close()


REFUSALS = {  # client id, secret given, what the error must say
    "wrong client secret": ("app", "wrong-" + uuid.uuid4().hex, "invalid_client"),
    "wrong audience": ("other-audience", None, "OAUTHBEARER"),
    "bad signature": ("foreign-key", None, "OAUTHBEARER"),
}


@pytest.mark.backends("kafka-confluent", "kafka-python")
@pytest.mark.parametrize("case", list(REFUSALS))
def test_a_refused_token_is_a_quick_typed_error(cluster, tokens, client, case):
    """This tests that a token the broker refuses (another audience, a signature the JWKS
    does not verify) and a client secret the endpoint refuses are AuthenticationFailed,
    not retriable, within seconds although the connect timeout is 30 s, naming where it
    failed and showing no token or secret."""
    client_id, secret, says = REFUSALS[case]
    options = {**oauth_options(cluster, tokens, client_id, secret), "kafka.client": client,
               "kafka.connect.timeout.ms": "30000"}
    start = time.monotonic()
    with pytest.raises(DurableWalError) as caught:
        open_store("kafka", "nope", **options)
    took = time.monotonic() - start
    exc = caught.value
    print(f"{client} {case} ({took:.1f}s): {type(exc).__name__}: {exc}")
    assert isinstance(exc, AuthenticationFailed), f"{type(exc).__name__}: {exc}"
    assert not exc.retriable and not isinstance(exc, BackendUnavailable)
    assert took < QUICK_S, f"a refusal took {took:.1f}s"
    assert says in str(exc)
    assert REDACTED not in str(exc), "a part of the message was masked as if secret"
    if case == "wrong client secret":
        assert f"the OAuth token endpoint {tokens.url}/token (client id 'app') refused" in str(exc)
    else:
        assert cluster.sasl_bootstrap() in str(exc) and "the broker refused the token" in str(exc)
    assert_nothing_shows(tokens, str(exc), "the error")
    if secret is not None:
        assert secret not in str(exc)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_unreachable_token_endpoint_is_retriable(cluster, tokens, client):
    """This tests that a token endpoint nobody listens on is a retriable
    BackendUnavailable naming the endpoint (the identity provider may come back), not a
    refusal, within seconds, on both clients."""
    url = f"http://127.0.0.1:{free_port()}/token"
    options = {**oauth_options(cluster, tokens), "kafka.client": client,
               "kafka.sasl.oauthbearer.token.endpoint.url": url,
               "kafka.connect.timeout.ms": "30000"}
    start = time.monotonic()
    with pytest.raises(BackendUnavailable) as caught:
        open_store("kafka", "nope", **options)
    took = time.monotonic() - start
    print(f"{client} unreachable endpoint ({took:.1f}s): {caught.value}")
    assert caught.value.retriable and took < QUICK_S
    assert f"cannot reach the OAuth token endpoint {url}" in str(caught.value)
    assert_nothing_shows(tokens, str(caught.value), "the error")


REVOKED_TIMEOUT_MS = 4000  # the handle's request timeout: the bound of the refusal


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_client_secret_refused_under_an_open_handle_is_a_typed_error(cluster, tokens,
                                                                        client, caplog):
    """This tests that once the token endpoint refuses the client secret of an open
    handle (rotated at the endpoint) and its last token has expired, the next append, the
    next read, the next new log and a listing of the broker's topics are each
    AuthenticationFailed, not retriable, naming the namespace, the endpoint and the client
    id, within the request timeout and the endpoint's answer; that neither secret nor any
    token shows in the errors or the DEBUG logs; and that a new handle works again once
    the endpoint takes the secret again (nothing in the process stays broken)."""
    caplog.set_level(logging.DEBUG)
    for name in ("kafka", "pyspark_durable", "confluent_kafka"):
        caplog.set_level(logging.DEBUG, logger=name)
    client_id = f"rotated-{client}"
    options = {**oauth_options(cluster, tokens, client_id), "kafka.client": client,
               "kafka.request.timeout.ms": str(REVOKED_TIMEOUT_MS)}
    ns = f"v{uuid.uuid4().hex[:10]}"
    store = open_store("kafka", ns, **options)
    profile = PROFILES[client_id]
    secret, refused = profile.secret, tokens.refused(client_id)
    try:
        log = store.open_log("region_0")
        assert log.append([Record(b"k", b"before")]) == [0]
        assert [e.value for e in log.read(0)] == [b"before"]
        profile.secret = secret_for("rotated")  # rotated at the endpoint
        # the client asks for a new token (librdkafka at 80 % of the lifetime; kafka-python
        # when its connection logs in again) and is refused
        tokens.wait_refused(client_id, refused + 1, timeout_s=4 * SHORT_S)
        # no event tells that a token expired: a wait bounded by its lifetime and the skew
        expired = max(i.expires for i in tokens.tokens(client_id))
        time.sleep(max(0.0, expired + SKEW_S + 0.5 - time.time()))
        errors = []
        for what, call in (("append", lambda: log.append([Record(b"k", b"after")])),
                           ("read", lambda: list(log.read(0))),
                           ("new log", lambda: store.open_log("region_1")),
                           ("topics", store.sibling_namespaces)):
            start = time.monotonic()
            with pytest.raises(DurableWalError) as caught:
                call()
            took = time.monotonic() - start
            exc = caught.value
            print(f"{client} {what} ({took:.1f}s): {type(exc).__name__}: {exc}")
            assert isinstance(exc, AuthenticationFailed), f"{what}: {type(exc).__name__}: {exc}"
            assert not exc.retriable and not isinstance(exc, BackendUnavailable)
            assert str(exc).startswith(f"namespace={ns} log=region_0: " if what in
                                       ("append", "read") else f"namespace={ns}"), str(exc)
            assert f"the OAuth token endpoint {tokens.url}/token (client id {client_id!r})" \
                in str(exc) and "invalid_client" in str(exc)
            assert took < 2 * REVOKED_TIMEOUT_MS / 1000 + QUICK_S, f"{what} took {took:.1f}s"
            errors.append(str(exc))
        assert secret not in "".join(errors) and profile.secret not in "".join(errors)
        assert_nothing_shows(tokens, "\n".join(errors), "the errors")
    finally:
        store.close()
        profile.secret = secret
    roundtrip(options)  # a new handle, the secret taken again
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert_nothing_shows(tokens, text, "the log records")


def cli_process(argv: list[str]) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent)}
    return subprocess.Popen([sys.executable, "-m", "pyspark_durable", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_the_cli_works_through_oauthbearer_and_prints_no_secret(cluster, tokens, client, tmp_path):
    """This tests that CLI commands reach the OAUTHBEARER listener with the options in a
    --kafka-config file, each as its own process at -vv (librdkafka with debug=all), and
    that no output shows the client secret or any token; a wrong secret is one line."""
    options = {**oauth_options(cluster, tokens), "kafka.client": client}
    ns_name = f"c{uuid.uuid4().hex[:10]}"
    ns = open_namespace({"backend": "kafka", "namespace": ns_name, "options": options})
    try:
        for step in range(2):
            write_step(ns, "loader", step, {"orders": pa.table({"id": [step]})})
    finally:
        ns.close()
    conf = tmp_path / "client.properties"
    conf.write_text("".join(f"{k.removeprefix('kafka.')}={v}\n" for k, v in options.items()))
    debug = ["--kafka-option", "debug=all"] if client == "confluent" else []
    before = len(tokens.tokens("app"))
    outputs = []
    for command in (["namespaces"], ["steps", "--namespace", ns_name],
                    ["tail", "--namespace", ns_name, "--table", "orders"]):
        proc = cli_process([*command, "--kafka-config", str(conf), "-vv", *debug])
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, (command, err[-3000:])
        outputs.append(out + err)
        if command[0] == "namespaces":
            assert ns_name in out
    assert len(tokens.tokens("app")) > before, "the CLI fetched no token"
    assert "durablewal: debug: " in "".join(outputs)
    assert_nothing_shows(tokens, "\n".join(outputs), "the CLI's output")
    bad = tmp_path / "bad.properties"
    bad.write_text(conf.read_text().replace(PROFILES["app"].secret, "nope-" + uuid.uuid4().hex))
    proc = cli_process(["steps", "--namespace", ns_name, "--kafka-config", str(bad), "-vv"])
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and out == ""
    assert "the OAuth token endpoint" in err and "invalid_client" in err
    assert "nope-" not in err
    assert_nothing_shows(tokens, err, "the CLI's error")


@pytest.mark.spark
def test_spark_reads_and_writes_through_oauthbearer(cluster, tokens, spark_session, tmp_path):
    """This tests a Spark batch write (confluent), a streaming copy (kafka-python) and a
    batch read over OAUTHBEARER, configured by string options only, with no token or
    client secret in the query's progress or explain output."""
    spark = spark_session
    options = {"backend": "kafka", **oauth_options(cluster, tokens)}
    src, dst = f"sa{uuid.uuid4().hex[:8]}", f"sb{uuid.uuid4().hex[:8]}"
    rows = spark.createDataFrame([(i, f"v{i}") for i in range(20)], "id long, v string")
    rows.write.format("durablewal").options(**options, namespace=src).mode("append").save()
    stream = (spark.readStream.format("durablewal")
              .options(**options, namespace=src, **{"kafka.client": "kafka-python"}).load())
    query = (stream.select("id", "v").writeStream.format("durablewal")
             .options(**options, namespace=dst, **{"kafka.client": "kafka-python"})
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
        assert query.exception() is None
        shown = [str(p) for p in query.recentProgress] + [str(query.status)]
    finally:
        query.stop()
    copied = spark.read.format("durablewal").options(**options, namespace=dst).load()
    assert sorted(r.id for r in copied.select("id").collect()) == list(range(20))
    assert_nothing_shows(tokens, "\n".join(shown), "the query's progress")
