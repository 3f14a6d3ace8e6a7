"""Authentication and secrets: the Kafka log over SASL (SCRAM-SHA-256, PLAIN) and TLS.

One broker for the module (``start_cluster(..., sasl=True, tls=True)``): a SASL_PLAINTEXT
listener whose users are created at format time (SCRAM) and in the listener's JAAS
line (PLAIN), and an SSL listener with a CA made by :mod:`kafka_tls`. Both clients
read and write through each; a wrong password is a quick, typed, non-retriable error;
and the password shows nowhere: errors, logs (ours and the clients'), the WAL's
topics, the CLI's output, and what Spark shows.
"""

from __future__ import annotations

import json
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

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, write_step
from pyspark_durable.errors import (
    AuthenticationFailed,
    BackendUnavailable,
    ConfigError,
    DurableWalError,
)
from pyspark_durable.log import Record, open_store
from pyspark_durable.secrets import REDACTED, redact_options, scrub
from tests.helpers import KAFKA_CLIENTS, ROOT
from tests.kafka_broker import KafkaCluster, cluster_for_tests, topic_bytes
from tests.kafka_tls import make_ca_and_server

pytestmark = pytest.mark.kafka

QUICK_S = 5.0  # a refused login must fail well before the 20 s connect timeout given
SCRAM_JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule"
PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Kafka node with PLAINTEXT, SASL_PLAINTEXT and SSL listeners, for this module."""
    with cluster_for_tests(tmp_path_factory.mktemp("kafka-auth"), 1, sasl=True,
                           tls=True) as broker:
        yield broker


def password(cluster: KafkaCluster) -> str:
    assert cluster.auth is not None
    return cluster.auth.password


def secrets_of(cluster: KafkaCluster) -> list[str]:
    """Every secret of the test broker: none may show anywhere."""
    auth = cluster.auth
    assert auth is not None
    return [auth.password, auth.admin_password, auth.keystore_password]


def assert_no_secret(cluster: KafkaCluster, text: str | bytes, where: str) -> None:
    for secret in secrets_of(cluster):
        needle = secret.encode() if isinstance(text, bytes) else secret
        assert needle not in text, f"a secret shows in {where}"


def connection(cluster: KafkaCluster, kind: str, secret: str | None = None) -> dict:
    """``open_store`` keywords (kafka-python's names) of one listener and login."""
    auth = cluster.auth
    assert auth is not None and auth.tls_dir is not None
    if kind == "ssl":
        return {"bootstrap_servers": cluster.ssl_bootstrap(), "security_protocol": "SSL",
                "ssl_cafile": str(auth.tls_dir / "ca.pem")}
    mechanism = {"scram": "SCRAM-SHA-256", "plain": "PLAIN"}[kind]
    return {"bootstrap_servers": cluster.sasl_bootstrap(), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": mechanism, "sasl_plain_username": auth.user,
            "sasl_plain_password": auth.password if secret is None else secret}


def jaas(module: str, user: str, secret: str) -> str:
    return f'{module} required username="{user}" password="{secret}";'


def roundtrip(store_kwargs: dict) -> None:
    """Append to a log and a snapshot, read both back, through a fresh store."""
    ns = f"a{uuid.uuid4().hex[:10]}"
    store = open_store("kafka", ns, **store_kwargs)
    try:
        log = store.open_log("region_0")
        assert log.append([Record(b"k1", b"v1"), Record(b"k2", b"v2")]) == [0, 1]
        store.write_snapshot("state", 1, b"snap")
    finally:
        store.close()
    again = open_store("kafka", ns, **store_kwargs)
    try:
        assert [e.value for e in again.open_log("region_0", create=False).read(0)] == \
            [b"v1", b"v2"]
        assert again.read_snapshot_version("state", 1) == b"snap"
        assert ns in type(again).list_namespaces(store_kwargs)
    finally:
        again.close()


# -- the log layer ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["scram", "plain", "ssl"])
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_the_log_reads_and_writes_over_sasl_and_tls(cluster, client, kind):
    """This tests that both clients append and read a log and a snapshot through the SASL
    listener (SCRAM-SHA-256 and PLAIN) and through the TLS listener (the test's CA),
    given kafka-python's option names (translated for librdkafka)."""
    roundtrip({**connection(cluster, kind), "client": client})


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_kafka_spellings_and_a_jaas_line_work_on_both_clients(cluster, client):
    """This tests that Kafka's own spellings, as Spark's Kafka connector takes them
    (``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``),
    and ``kafka.ssl.check.hostname`` log in on both clients."""
    auth = cluster.auth
    assert auth is not None and auth.tls_dir is not None
    roundtrip({"kafka.bootstrap.servers": cluster.sasl_bootstrap(), "kafka.client": client,
               "kafka.security.protocol": "SASL_PLAINTEXT",
               "kafka.sasl.mechanism": "SCRAM-SHA-256",
               "kafka.sasl.jaas.config": jaas(SCRAM_JAAS, auth.user, auth.password)})
    roundtrip({"kafka.bootstrap.servers": cluster.sasl_bootstrap(), "kafka.client": client,
               "kafka.security.protocol": "SASL_PLAINTEXT",  # PLAIN from the login module
               "kafka.sasl.jaas.config": jaas(PLAIN_JAAS, auth.user, auth.password)})
    roundtrip({"kafka.bootstrap.servers": cluster.ssl_bootstrap(), "kafka.client": client,
               "kafka.security.protocol": "SSL", "kafka.ssl.check.hostname": "true",
               "kafka.ssl.cafile": str(auth.tls_dir / "ca.pem")})


@pytest.mark.parametrize("kind", ["scram", "plain"])
@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_wrong_password_is_a_quick_typed_error(cluster, client, kind):
    """This tests that a wrong password is AuthenticationFailed (not retriable, not a
    BackendUnavailable) naming the broker and the SASL mechanism, within seconds although
    the connect timeout is 20 s, on both clients and both mechanisms."""
    wrong = "wrong-" + uuid.uuid4().hex
    options = {**connection(cluster, kind, secret=wrong), "client": client,
               "connect_timeout_ms": 20_000}
    start = time.monotonic()
    with pytest.raises(AuthenticationFailed) as caught:
        open_store("kafka", "nope", **options)
    took = time.monotonic() - start
    assert took < QUICK_S, f"a refused login took {took:.1f}s"
    exc = caught.value
    assert not exc.retriable and not isinstance(exc, BackendUnavailable)
    text = str(exc)
    assert cluster.sasl_bootstrap() in text
    assert options["sasl_mechanism"] in text
    assert wrong not in text
    assert_no_secret(cluster, text, "the error")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_an_untrusted_broker_certificate_is_a_quick_typed_error(cluster, client, tmp_path):
    """This tests that a TLS listener whose certificate another CA signed is
    AuthenticationFailed naming the broker, quickly, on both clients."""
    other = make_ca_and_server(tmp_path / "other-ca", "unused-" + uuid.uuid4().hex)
    start = time.monotonic()
    with pytest.raises(AuthenticationFailed) as caught:
        open_store("kafka", "nope", bootstrap_servers=cluster.ssl_bootstrap(), client=client,
                   security_protocol="SSL", ssl_cafile=str(other / "ca.pem"),
                   connect_timeout_ms=20_000)
    assert time.monotonic() - start < QUICK_S
    assert cluster.ssl_bootstrap() in str(caught.value)
    assert "SSL" in str(caught.value)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_bad_option_never_quotes_a_secret(cluster, client):
    """This tests that ConfigErrors about options holding a secret (a misspelt key, the
    unknown-option listing, a JAAS line of an unsupported login module, a secret given as
    a value the client refuses or quotes) name the option, never its value."""
    secret = password(cluster)
    base = {"bootstrap_servers": cluster.sasl_bootstrap(), "client": client,
            "security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "alice"}
    cases = [
        {**base, "sasl_plain_pasword": secret},  # misspelt: unknown option, listing
        {**base, "kafka.sasl.jaas.config": f'com.example.Login required password="{secret}";'},
        {**base, "sasl_plain_password": secret, "sasl_mechanism": secret},  # refused value
        {**base, "kafka.sasl.pasword": secret},  # librdkafka's name, misspelt
    ]
    for options in cases:
        with pytest.raises(DurableWalError) as caught:
            open_store("kafka", "nope", **options)
        assert isinstance(caught.value, ConfigError | AuthenticationFailed), caught.value
        assert_no_secret(cluster, str(caught.value), f"the error for {redact_options(options)}")


def test_redaction_helpers_mask_every_spelling():
    """This tests the redaction helpers: secret keys by name (Spark's regex and more),
    a remembered value in any text (and in a bytes repr), SASL auth_bytes of a log line."""
    opts = redact_options({"kafka.sasl.jaas.config": "x", "kafka.sasl.password": "y",
                           "ssl.key.pem": "z", "bootstrap.servers": "b"})
    assert opts == {"kafka.sasl.jaas.config": REDACTED, "kafka.sasl.password": REDACTED,
                    "ssl.key.pem": REDACTED, "bootstrap.servers": "b"}
    from pyspark_durable.secrets import remember

    remember({"sasl.password": "s3cr'et\x01!"})
    assert "s3cr" not in scrub(f"a {'s3cr' + chr(39) + 'et' + chr(1) + '!'} b "
                               f"{('s3cr' + chr(39) + 'et' + chr(1) + '!').encode()!r}")
    assert "hunter" not in scrub("SaslAuthenticateRequest(auth_bytes=b'a\\x00a\\x00hunter2')")


def test_a_short_secret_printed_beside_its_key_is_masked():
    """This tests that a secret too short to be scrubbed as free text is still masked
    where a client prints it beside its key (kafka-python's admin client logs its whole
    configuration at DEBUG), in a key=value line and in a JAAS line, while unset secrets
    and ordinary words stay readable, and that a long line is scrubbed in linear time."""
    config = {"bootstrap_servers": ["127.0.0.1:9092"], "sasl_plain_username": "alice",
              "sasl_plain_password": "pw1", "sasl_oauth_token_provider": None}
    text = scrub(f"Starting KafkaAdminClient with configuration: {config}")
    assert "pw1" not in text and "'alice'" in text and "'sasl_oauth_token_provider': None" in text
    assert scrub("sasl.password=pw1, ssl.key.password = pw2") == \
        f"sasl.password={REDACTED}, ssl.key.password = {REDACTED}"
    assert "pw3" not in scrub(f"{PLAIN_JAAS} required username=\"alice\" password=\"pw3\";")
    assert scrub("Invalid username or password") == "Invalid username or password"
    start = time.monotonic()  # a long token (a logged record's bytes) costs linear time
    assert scrub("password: " + "ab" * 100_000 + " " + "x" * 200_000) == \
        f"password: {REDACTED} " + "x" * 200_000
    assert time.monotonic() - start < 2.0


# -- nothing shows: logs, stored metadata, errors -----------------------------------


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_no_secret_in_logs_stored_metadata_or_errors(cluster, client, caplog):
    """This tests that a whole WAL session over SASL PLAIN (the password goes on the wire
    in clear: kafka-python logs that request at DEBUG) and a refused login leave no secret
    in any log record of this package or the clients (DEBUG), nor in the bytes of every
    topic of the namespace; the scan proves it saw the client's own records (librdkafka's
    debug lines reach our logger through its ``logger`` callback once ``debug`` asks)."""
    caplog.set_level(logging.DEBUG)
    for name in ("kafka", "pyspark_durable", "confluent_kafka"):
        caplog.set_level(logging.DEBUG, logger=name)
    ns_name = f"m{uuid.uuid4().hex[:10]}"
    debug = {"debug": "security,broker,protocol"} if client == "confluent" else {}
    options = {**connection(cluster, "plain"), "client": client, **debug}
    ns = open_namespace({"backend": "kafka", "namespace": ns_name, "options": options})
    try:
        for step in range(3):
            write_step(ns, "writer", step, {"orders": pa.table({"id": [step, step + 1]})})
    finally:
        ns.close()
    with pytest.raises(AuthenticationFailed):
        open_store("kafka", ns_name, **{**options, "sasl_plain_password": password(cluster)[::-1]})
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    client_logger = {"confluent": "pyspark_durable.log.kafka.librdkafka", "kafka-python": "kafka."}
    seen = [r for r in caplog.records if r.name.startswith(client_logger[client])]
    assert len(seen) > 10, f"the scan saw {len(seen)} records of {client}'s logger"
    assert_no_secret(cluster, text, "the log records")
    assert password(cluster)[::-1] not in text
    assert_no_secret(cluster, topic_bytes(cluster, ns_name), "the WAL's topics")


# -- the CLI ------------------------------------------------------------------------


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def shop(cluster: KafkaCluster) -> str:
    """A namespace with 3 steps of table 'orders', written over SCRAM."""
    name = f"c{uuid.uuid4().hex[:10]}"
    ns = open_namespace({"backend": "kafka", "namespace": name,
                         "options": connection(cluster, "scram")})
    try:
        for step in range(3):
            write_step(ns, "loader", step, {"orders": pa.table({"id": [step]})})
    finally:
        ns.close()
    return name


def properties(path: Path, cluster: KafkaCluster, secret: str | None = None) -> Path:
    auth = cluster.auth
    assert auth is not None
    path.write_text(
        "# like Kafka's --command-config\n"
        f"bootstrap.servers={cluster.sasl_bootstrap()}\n"
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        f"sasl.jaas.config={SCRAM_JAAS} required \\\n"
        f'    username="{auth.user}" \\\n'
        f'    password="{auth.password if secret is None else secret}";\n')
    return path


def test_the_cli_reaches_a_sasl_broker_with_a_config_file(cluster, shop, tmp_path, capsys):
    """This tests that every read-only command reaches the SASL listener with
    --kafka-config FILE (a Java properties file, Kafka's --command-config, JAAS line
    continued over lines) and --kafka-option, and that no output (tables, --json, -vv
    logs) shows the password."""
    conf = properties(tmp_path / "client.properties", cluster)
    runs = [["namespaces"], ["regions", "--namespace", shop], ["tables", "--namespace", shop],
            ["steps", "--namespace", shop], ["tail", "--namespace", shop, "--table", "orders"],
            ["check", "--namespace", shop], ["retention", "--namespace", shop],
            ["clean", "--namespace", shop, "--grace-ms", "0"]]
    for client in KAFKA_CLIENTS:
        for argv in runs:
            # the output formats are the client's neither: the other client runs the
            # mode whose output is its own, the -vv logs
            modes = ([], ["--json"], ["-vv"]) if client == KAFKA_CLIENTS[0] else (["-vv"],)
            for extra in modes:
                code, out, err = cli(capsys, *argv, "--kafka-config", conf,
                                     "--kafka-option", f"client={client}", *extra)
                assert code == 0, (argv, extra, err)
                assert_no_secret(cluster, out + err, f"durablewal {argv} {extra}")
    code, out, _ = cli(capsys, "steps", "--namespace", shop, "--kafka-config", conf, "--json")
    assert [s["step"] for s in json.loads(out)["steps"]] == [0, 1, 2]
    code, out, _ = cli(capsys, "namespaces", "--names-only", "--kafka-config", conf,
                       "--bootstrap-servers", cluster.sasl_bootstrap())
    assert shop in out.split()


SHORT_USER, SHORT_PASSWORD = "bob", "Zq!9x"  # shorter than secrets.MIN_SCRUB_LEN
CLI_COMMANDS = [["namespaces"], ["regions"], ["tables"], ["steps"],
                ["tail", "--table", "orders"], ["check"], ["retention"],
                ["clean", "--grace-ms", "0"]]
# a few at a time: each prints its clients' DEBUG lines, and on 2 cores beside the rest of
# the suite three of them starved each other past kafka-python's request timeout
CLI_PARALLEL = 2


@pytest.fixture(scope="module")
def short_password_user(cluster: KafkaCluster) -> str:
    """A SCRAM-SHA-256 user whose password is too short to be scrubbed as free text."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    upsert = UserScramCredentialUpsertion(
        SHORT_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
        SHORT_PASSWORD.encode())
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)
    return SHORT_USER


def cli_process(argv: list[str]) -> subprocess.Popen:
    """``durablewal ARGV`` as its own process (its loggers made in their real order)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "pyspark_durable", *argv], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_no_cli_command_prints_a_secret_at_any_verbosity(cluster, shop, short_password_user,
                                                         tmp_path, client):
    """This tests that every durablewal command, run as its own process with -vv (our
    DEBUG lines and the Kafka client's: kafka-python logs its configuration, librdkafka
    runs with debug=all) against the SASL listener, prints no secret on stdout or stderr:
    not a PLAIN password (sent in clear), not a 5-character SCRAM password."""
    auth = cluster.auth
    assert auth is not None
    logins = {"plain": (PLAIN_JAAS, "PLAIN", auth.user, auth.password),
              "short": (SCRAM_JAAS, "SCRAM-SHA-256", short_password_user, SHORT_PASSWORD)}
    confs = {}
    for name, (module, mechanism, user, secret) in logins.items():
        confs[name] = tmp_path / f"{name}.properties"
        confs[name].write_text(f"bootstrap.servers={cluster.sasl_bootstrap()}\n"
                               "security.protocol=SASL_PLAINTEXT\n"
                               f"sasl.mechanism={mechanism}\n"
                               f"sasl.jaas.config={jaas(module, user, secret)}\n")
    debug = ["--kafka-option", "debug=all"] if client == "confluent" else []
    runs: list[tuple[str, list[str], subprocess.Popen]] = []
    outputs = []
    for i, command in enumerate([*CLI_COMMANDS, None]):
        if len(runs) == CLI_PARALLEL or command is None:  # a few at a time: 2 cores
            for name, done, proc in runs:
                out, err = proc.communicate(timeout=120)
                errors = [ln for ln in err.splitlines() if ln.startswith("durablewal: error")]
                assert proc.returncode == 0, (name, done, errors, err[-3000:])
                outputs.append(out + err)
                for secret in [*secrets_of(cluster), SHORT_PASSWORD]:
                    assert secret not in out + err, f"a secret shows in durablewal {done} ({name})"
            runs = []
        if command is None:
            break
        name = ("plain", "short")[i % 2]  # each login on half the commands
        namespace = [] if command[0] == "namespaces" else ["--namespace", shop]
        runs.append((name, command, cli_process(
            [*command, *namespace, "--kafka-config", str(confs[name]), "-vv",
             # a SCRAM login with every DEBUG line took kafka-python over 20 s under load
             "--timeout-ms", "60000", "--kafka-option", f"client={client}",
             "--kafka-option", "request_timeout_ms=90000", *debug])))
    shown = "\n".join(outputs)
    assert shown.count("durablewal: debug: ") > 100  # the clients' chatter was printed
    if client == "kafka-python":  # its configuration, with the password's key, was printed
        assert "'sasl_plain_password': *********(redacted)" in shown
    else:
        assert "sasl.password" in shown


def test_the_cli_warns_of_a_secret_on_the_command_line(cluster, shop, capsys):
    """This tests that a password given with --kafka-option works but is warned about
    (one line naming the option, not the value)."""
    auth = cluster.auth
    assert auth is not None
    code, out, err = cli(capsys, "steps", "--namespace", shop,
                         "--bootstrap-servers", cluster.sasl_bootstrap(),
                         "--kafka-option", "security.protocol=SASL_PLAINTEXT",
                         "--kafka-option", "sasl.mechanism=SCRAM-SHA-256",
                         "--kafka-option", f"sasl.plain.username={auth.user}",
                         "--kafka-option", f"sasl.plain.password={auth.password}")
    assert code == 0, err
    assert "--kafka-option sasl.plain.password puts a secret on the command line" in err
    assert_no_secret(cluster, out + err, "the output")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_the_cli_reports_a_wrong_password_in_one_line(cluster, shop, tmp_path, capsys, client):
    """This tests that a wrong password in the --kafka-config file is one line on stderr
    naming the broker and the mechanism, exit 2, quickly (the timeout is 20 s)."""
    wrong = "bad-" + uuid.uuid4().hex
    conf = properties(tmp_path / "bad.properties", cluster, secret=wrong)
    for argv in (["namespaces"], ["steps", "--namespace", shop]):
        start = time.monotonic()
        code, out, err = cli(capsys, *argv, "--kafka-config", conf, "--timeout-ms", "20000",
                             "--kafka-option", f"client={client}")
        assert time.monotonic() - start < QUICK_S
        assert (code, out) == (2, "")
        assert err.startswith("durablewal: error: ") and err.count("\n") == 1, err
        assert cluster.sasl_bootstrap() in err and "SCRAM-SHA-256" in err
        assert wrong not in err
        assert_no_secret(cluster, err, "the error line")


def test_the_cli_config_file_errors_name_no_secret(cluster, tmp_path, capsys):
    """This tests that an unreadable config file and a bad line are one-line errors, and
    that a line is named by its number, never by its (possibly secret) text."""
    code, _, err = cli(capsys, "namespaces", "--kafka-config", tmp_path / "missing")
    assert code == 2 and "cannot read --kafka-config" in err and err.count("\n") == 1
    bad = tmp_path / "bad.properties"
    bad.write_text(f"bootstrap.servers={cluster.sasl_bootstrap()}\n={password(cluster)}\n")
    code, _, err = cli(capsys, "namespaces", "--kafka-config", bad)
    assert code == 2 and "line 2" in err
    assert_no_secret(cluster, err, "the error line")


# -- Spark --------------------------------------------------------------------------


def progress_text(progress) -> str:
    """A query's progress as the JSON Spark reports (a dict or a StreamingQueryProgress)."""
    if progress is None:
        return ""
    return progress.json if hasattr(progress, "json") else json.dumps(progress, default=str)


@pytest.mark.spark
def test_spark_reads_and_writes_over_sasl_and_shows_no_secret(cluster, spark_session, tmp_path,
                                                              capfd):
    """This tests a session writing and reading a batch and a stream over SASL with
    ``kafka.security.protocol``, ``kafka.sasl.mechanism`` and ``kafka.sasl.jaas.config``
    (a key Spark's redaction regex does not match) or ``kafka.sasl.plain.password``, and
    that the secret is in no explain() output, no query progress and not in the error
    text of a query refused for a wrong password."""
    spark = spark_session
    auth = cluster.auth
    assert auth is not None
    base = {"backend": "kafka", "kafka.bootstrap.servers": cluster.sasl_bootstrap(),
            "kafka.security.protocol": "SASL_PLAINTEXT"}
    with_jaas = {**base, "kafka.sasl.mechanism": "SCRAM-SHA-256",
                 "kafka.sasl.jaas.config": jaas(SCRAM_JAAS, auth.user, auth.password)}
    with_password = {**base, "kafka.sasl.mechanism": "PLAIN",
                     "kafka.sasl.plain.username": auth.user,
                     "kafka.sasl.plain.password": auth.password}
    src, dst = f"sp{uuid.uuid4().hex[:8]}", f"sq{uuid.uuid4().hex[:8]}"
    shown: list[str] = []

    def explain(df_or_query) -> None:
        capfd.readouterr()
        if hasattr(df_or_query, "isStreaming") and not hasattr(df_or_query, "awaitTermination"):
            for mode in ("simple", "extended", "codegen", "cost", "formatted"):
                df_or_query.explain(mode=mode)
        else:
            df_or_query.explain(extended=True)
        out, err = capfd.readouterr()
        shown.append(out + err)

    rows = spark.createDataFrame([(i, f"v{i}") for i in range(20)], "id long, v string")
    rows.write.format("durablewal").options(**with_jaas, namespace=src).mode("append").save()
    batch = spark.read.format("durablewal").options(**with_password, namespace=src).load()
    explain(batch)
    assert sorted(r.id for r in batch.select("id").collect()) == list(range(20))

    stream = spark.readStream.format("durablewal").options(**with_jaas, namespace=src).load()
    explain(stream)
    query = (stream.select("id", "v").writeStream.format("durablewal")
             .options(**with_password, namespace=dst)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        explain(query)
        assert query.recentProgress, "no progress was reported"
        shown.append(progress_text(query.lastProgress))
        shown.extend(progress_text(p) for p in query.recentProgress)
        shown.append(str(query.status))
        assert query.exception() is None
    finally:
        query.stop()
    copied = spark.read.format("durablewal").options(**with_jaas, namespace=dst).load()
    assert copied.count() == 20

    wrong = {**with_jaas, "kafka.sasl.jaas.config": jaas(SCRAM_JAAS, auth.user,
                                                          "nope-" + uuid.uuid4().hex)}
    wrong["kafka.connect.timeout.ms"] = "20000"
    start = time.monotonic()
    with pytest.raises(Exception) as caught:
        spark.read.format("durablewal").options(**wrong, namespace=src).load().collect()
    assert time.monotonic() - start < 30
    failure = str(caught.value)
    assert "AuthenticationFailed" in failure and cluster.sasl_bootstrap() in failure
    shown.append(failure)
    failing = (spark.readStream.format("durablewal").options(**with_jaas, namespace=src).load()
               .writeStream.format("durablewal")
               .options(**{**with_password, "kafka.sasl.plain.password": "nope-" + auth.user},
                        namespace=dst)
               .option("checkpointLocation", str(tmp_path / "ckpt2"))
               .trigger(availableNow=True).start())
    try:
        with pytest.raises(Exception) as stream_failed:
            failing.awaitTermination(120)
        shown.append(str(stream_failed.value))
        shown.append(str(failing.exception()))
        shown.append(progress_text(failing.lastProgress))
    finally:
        failing.stop()
    for i, text in enumerate(shown):
        assert_no_secret(cluster, text, f"Spark's output #{i}: {text[:300]}")


WORKER_LOGGING = '''\
"""Loaded by every Python process Spark starts for this test: our loggers and the
Kafka client's at DEBUG, into one file."""
import logging
import os

_handler = logging.FileHandler(os.environ["DURABLEWAL_TEST_WORKER_LOG"])
_handler.setFormatter(logging.Formatter("%(process)d %(name)s %(levelname)s %(message)s"))
for _name in ("pyspark_durable", "kafka"):
    logging.getLogger(_name).setLevel(logging.DEBUG)
    logging.getLogger(_name).addHandler(_handler)
'''


@pytest.fixture
def workers_logging_at_debug(spark_session, tmp_path) -> Iterator[Path]:
    """Spark's Python processes for durablewal log ``pyspark_durable`` and ``kafka`` at
    DEBUG into the returned file: a ``sitecustomize`` on their PYTHONPATH, given through
    the environment the data source is registered with (a new registration with another
    environment gets its own Python daemon). Registered again as before afterwards."""
    import pyspark_durable

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(WORKER_LOGGING)
    log_file = tmp_path / "workers.log"
    environment = spark_session.sparkContext.environment
    saved = dict(environment)
    environment.update(PYTHONPATH=os.pathsep.join(
        p for p in (str(site), environment.get("PYTHONPATH", "")) if p),
        DURABLEWAL_TEST_WORKER_LOG=str(log_file))
    pyspark_durable.register(spark_session)
    try:
        yield log_file
    finally:
        environment.clear()
        environment.update(saved)
        pyspark_durable.register(spark_session)


@pytest.mark.spark
def test_our_loggers_at_debug_in_spark_show_no_secret(cluster, spark_session,
                                                      workers_logging_at_debug, tmp_path):
    """This tests that a Spark batch write, streaming read-and-write and batch read over
    SASL PLAIN (a kafka-python user's password in clear on the wire) leave no secret in
    what this package's loggers and the Kafka client's log at DEBUG in Spark's Python
    processes, where the WAL's stores run."""
    auth = cluster.auth
    assert auth is not None
    options = {"backend": "kafka", "kafka.bootstrap.servers": cluster.sasl_bootstrap(),
               "kafka.client": "kafka-python", "kafka.security.protocol": "SASL_PLAINTEXT",
               "kafka.sasl.mechanism": "PLAIN", "kafka.sasl.plain.username": auth.user,
               "kafka.sasl.plain.password": auth.password}
    spark = spark_session
    src, dst = f"dl{uuid.uuid4().hex[:8]}", f"dm{uuid.uuid4().hex[:8]}"
    rows = spark.createDataFrame([(i, f"v{i}") for i in range(10)], "id long, v string")
    rows.write.format("durablewal").options(**options, namespace=src).mode("append").save()
    query = (spark.readStream.format("durablewal").options(**options, namespace=src).load()
             .select("id", "v").writeStream.format("durablewal")
             .options(**options, namespace=dst)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination(120)
        assert query.exception() is None
    finally:
        query.stop()
    copied = spark.read.format("durablewal").options(**options, namespace=dst).load()
    assert sorted(r.id for r in copied.select("id").collect()) == list(range(10))
    logged = workers_logging_at_debug.read_text()
    assert " pyspark_durable." in logged and " kafka." in logged  # DEBUG lines were written
    assert "auth_bytes=" + REDACTED in logged  # the PLAIN request, logged and masked
    assert_no_secret(cluster, logged, "the DEBUG log of Spark's Python processes")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_listener_reached_with_the_wrong_protocol_is_named_within_a_second(cluster, client):
    """This tests that a client speaking the wrong security protocol to a listener (PLAINTEXT
    to the SASL or the TLS listener, SASL_PLAINTEXT to the TLS one) gets, within a second, a
    ConfigError naming the listener's kind and the setting that fixes it, instead of the
    client's own "transport failure" or timeout after connect_timeout_ms; and that the
    right protocol on each listener still works."""
    open_store("kafka", "nope", bootstrap_servers=cluster.bootstrap, client=client).close()
    sasl = {k: v for k, v in connection(cluster, "plain").items() if k != "bootstrap_servers"}
    cases = [(cluster.sasl_bootstrap(), {}, "a SASL listener", "speaks PLAINTEXT",
              "security.protocol=SASL_PLAINTEXT"),
             (cluster.ssl_bootstrap(), {}, "a TLS listener", "speaks PLAINTEXT",
              "security.protocol=SSL"),
             (cluster.ssl_bootstrap(), sasl, "a TLS listener", "speaks SASL_PLAINTEXT",
              "security.protocol=SSL")]
    for address, options, *needles in cases:
        start = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            open_store("kafka", "nope", bootstrap_servers=address, client=client,
                       connect_timeout_ms=20_000, **options)
        took = time.monotonic() - start
        assert took < 1.0, f"{took:.2f} s to name the listener at {address}"
        text = str(caught.value)
        assert f"Kafka broker {address} is " in text
        for needle in needles:
            assert needle in text, text
        assert "--kafka-config" in text and "kafka.security.protocol" in text
        assert_no_secret(cluster, text, "the error")
    roundtrip({**connection(cluster, "plain"), "client": client})
    roundtrip({**connection(cluster, "ssl"), "client": client})
