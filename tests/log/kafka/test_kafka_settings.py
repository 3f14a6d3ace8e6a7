"""The Kafka backend's own options are a table (log/kafka/settings.py, OWN_OPTIONS): each
option's parser, minimum and field. Parsing connects to nothing, so no broker runs here;
tests/log/kafka/test_kafka_backend.py checks the options against a real broker."""

from __future__ import annotations

import uuid

import pytest

from pyspark_durable.errors import ConfigError
from pyspark_durable.log.kafka.oauth import client_credentials
from pyspark_durable.log.kafka.settings import CLIENT_NAMES, OWN_OPTIONS, KafkaSettings
from pyspark_durable.secrets import REDACTED, redact_options, scrub

SERVERS = "127.0.0.1:9"


@pytest.mark.parametrize("client", CLIENT_NAMES)
def test_own_options_given_as_spark_strings_are_typed_into_their_fields(client):
    """This tests that own options given as Spark's strings, in any spelling, reach their
    KafkaSettings fields typed, and min.insync.replicas reaches the topic configs."""
    settings = KafkaSettings.parse(
        {
            "kafka.bootstrap.servers": SERVERS,
            "kafka.client": client,
            "connect.timeout.ms": "5000",
            "request_timeout_ms": " 7000 ",
            "kafka.replication.factor": "3",
            "kafka.min.insync.replicas": "2",
            "topic_config": {"segment.ms": 100},
        }
    )
    assert (settings.bootstrap_servers, settings.client) == (SERVERS, client)
    assert (settings.connect_timeout_ms, settings.request_timeout_ms) == (5000, 7000)
    assert settings.replication_factor == 3
    assert settings.topic_config == {"segment.ms": "100", "min.insync.replicas": "2"}
    defaults = KafkaSettings.parse({"bootstrap_servers": [SERVERS, "127.0.0.1:10"], "client": client})
    assert defaults.bootstrap_servers == f"{SERVERS},127.0.0.1:10"
    assert (defaults.replication_factor, defaults.topic_config) == (-1, {})
    assert defaults.connect_timeout_ms == OWN_OPTIONS["connect_timeout_ms"].default


def test_confluent_compresses_batches_with_lz4_unless_the_options_say_otherwise():
    """This tests that the confluent producer compresses its batches with lz4 by default,
    that a user's compression (in either client's spelling) wins, and that no consumer
    is handed a producer-only property (librdkafka would warn about it on every open)."""
    def clients(**given: str) -> dict:
        return KafkaSettings.parse({"bootstrap_servers": SERVERS, "client": "confluent",
                                    **given}).clients
    default = clients()
    assert default["producer"]["compression.type"] == "lz4"
    assert clients(**{"kafka.compression.type": "none"})["producer"]["compression.type"] == "none"
    assert clients(compression_type="zstd")["producer"]["compression.type"] == "zstd"
    for given in ({}, {"kafka.compression.type": "gzip", "kafka.linger.ms": "2"}):
        consumer = clients(**given)["consumer"]
        assert not {"compression.type", "compression.codec", "linger.ms"} & set(consumer)


@pytest.mark.parametrize("name", [n for n, o in OWN_OPTIONS.items() if o.minimum is not None])
def test_each_own_options_minimum_is_taken_and_one_below_is_refused_naming_it(name):
    """This tests that an own option with a minimum takes it and refuses one less with a
    ConfigError naming the option (as spelled too), the value and what is allowed."""
    opt = OWN_OPTIONS[name]
    base = {"bootstrap_servers": SERVERS}
    KafkaSettings.parse({**base, name: str(opt.minimum)})
    below = opt.minimum - 1
    dotted = "kafka." + name.replace("_", ".")
    with pytest.raises(
        ConfigError,
        match=rf"option {name}={below} is invalid: at least {opt.minimum}"
        rf".* \(given as {dotted}='{below}'\)",
    ):
        KafkaSettings.parse({**base, dotted: str(below)})
    with pytest.raises(ConfigError, match=rf"option {dotted}='1\.5' is not an integer"):
        KafkaSettings.parse({**base, dotted: "1.5"})


def test_the_broker_default_below_a_minimum_is_taken():
    """This tests that replication_factor=-1, below its minimum of 1, is taken as the
    broker's default, while 0 and -2 are refused saying -1 is the way to ask for it."""
    assert (
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "replication_factor": "-1"}).replication_factor
        == -1
    )
    for bad in ("0", "-2"):
        with pytest.raises(
            ConfigError,
            match=rf"replication_factor={bad} is invalid: at least 1, "
            "or -1 for the broker's default",
        ):
            KafkaSettings.parse({"bootstrap_servers": SERVERS, "replication_factor": bad})


def test_topic_config_is_a_mapping_without_retention():
    """This tests that topic_config must be a mapping and may not set the broker-side
    retention that would delete records behind the WAL's cleaner."""
    with pytest.raises(ConfigError, match=r"option topic_config='retention.ms=1' is not a mapping"):
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "topic_config": "retention.ms=1"})
    with pytest.raises(ConfigError, match=r"topic_config \['cleanup.policy'\] cannot be set"):
        KafkaSettings.parse({"bootstrap_servers": SERVERS, "topic_config": {"cleanup.policy": "delete"}})


OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
HANDLERS = ("org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
            "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler")
TOKEN_URL = "https://idp.example/oauth2/token"


def oauth_jaas(secret: str, more: str = "") -> dict[str, str]:
    """A Java client's OAUTHBEARER configuration, as Spark passes it."""
    return {"kafka.bootstrap.servers": SERVERS, "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
            "kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="writer" '
                                      f'clientSecret="{secret}" scope="kafka"{more};'}


@pytest.mark.parametrize("client", CLIENT_NAMES)
@pytest.mark.parametrize("handler", (None, *HANDLERS))
def test_an_oauthbearer_jaas_line_becomes_the_oauthbearer_options(client, handler):
    """This tests that a Java client's OAuthBearerLoginModule JAAS line (clientId,
    clientSecret, scope) with the token endpoint URL, and Kafka 4's or 3.x's login
    callback handler or none, becomes the mechanism and the client credentials each
    client logs in with, and that its secret is masked wherever sasl.password is."""
    secret = f"cs-{uuid.uuid4().hex}"
    options = {**oauth_jaas(secret), "kafka.client": client}
    if handler:
        options["kafka.sasl.login.callback.handler.class"] = handler
    producer = KafkaSettings.parse(options).clients["producer"]
    if client == "confluent":
        assert {k: v for k, v in producer.items() if k.startswith("sasl.")} == {
            "sasl.mechanisms": "OAUTHBEARER", "sasl.oauthbearer.method": "oidc",
            "sasl.oauthbearer.token.endpoint.url": TOKEN_URL,
            "sasl.oauthbearer.client.id": "writer", "sasl.oauthbearer.client.secret": secret,
            "sasl.oauthbearer.scope": "kafka"}
    else:
        assert producer["sasl_mechanism"] == "OAUTHBEARER"
        tokens = producer["sasl_oauth_token_provider"].tokens
        assert (tokens.url, tokens.client_id, tokens.scope) == (TOKEN_URL, "writer", "kafka")
        # the process's one ClientCredentials of this endpoint, client, secret and scope
        assert client_credentials(TOKEN_URL, "writer", secret, "kafka", 1.0) is tokens
        assert secret not in repr(producer["sasl_oauth_token_provider"])
    assert scrub(f"endpoint said {secret}") == f"endpoint said {REDACTED}"
    assert redact_options(options)["kafka.sasl.jaas.config"] == REDACTED


JAAS_REFUSALS = {  # options, what the ConfigError must name
    "an unknown login module": (
        {"kafka.sasl.jaas.config": 'com.example.TokenLogin required clientSecret="{s}";'},
        "option 'kafka.sasl.jaas.config' names a login module that cannot be translated"),
    "no token endpoint": (
        {"kafka.sasl.oauthbearer.token.endpoint.url": None},
        "OAuthBearerLoginModule needs sasl.oauthbearer.token.endpoint.url"),
    "an option not supported": (
        {"kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="w" clientSecret="{{s}}" '
                                   'extension_logicalCluster="{s}";'},
        "OAuthBearerLoginModule option(s) extension_logicalCluster, not supported"),
    "the unsecured login's options": (
        {"kafka.sasl.jaas.config": f'{OAUTH_MODULE} required unsecuredLoginStringClaim_sub='
                                   '"{s}";'},
        "OAuthBearerLoginModule option(s) unsecuredLoginStringClaim_sub, not supported"),
    "no client secret": (
        {"kafka.sasl.jaas.config": f'{OAUTH_MODULE} required clientId="w";'},
        "OAuthBearerLoginModule in option 'kafka.sasl.jaas.config' needs clientSecret"),
    "another login callback handler": (
        {"kafka.sasl.login.callback.handler.class": "com.example.Handler"},
        "sasl.login.callback.handler.class='com.example.Handler': only Kafka's "
        "OAuthBearerLoginCallbackHandler"),
}


@pytest.mark.parametrize("client", CLIENT_NAMES)
@pytest.mark.parametrize("case", list(JAAS_REFUSALS))
def test_an_oauthbearer_jaas_line_we_cannot_translate_is_a_config_error(client, case):
    """This tests that an OAUTHBEARER JAAS configuration that cannot be translated (an
    unknown login module, no token endpoint URL, a module option other than clientId,
    clientSecret and scope, no client secret, a login callback handler other than
    Kafka's) is a ConfigError naming the option, never showing the secret."""
    secret = f"cs-{uuid.uuid4().hex}"
    changes, says = JAAS_REFUSALS[case]
    options = {**oauth_jaas(secret), "kafka.client": client,
               **{k: v.replace("{s}", secret) if v else v for k, v in changes.items()}}
    with pytest.raises(ConfigError) as caught:
        KafkaSettings.parse({k: v for k, v in options.items() if v is not None})
    assert says in str(caught.value), str(caught.value)
    assert secret not in str(caught.value) and REDACTED not in str(caught.value)
