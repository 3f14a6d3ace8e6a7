"""Least privilege: each role's rights on a broker whose authorizer is on, as measured.

One broker for the module (``sasl=True``, :func:`kafka_broker.authorizer_settings`): Kafka's
StandardAuthorizer, SASL/PLAIN users ``reader``, ``writer``, ``cleaner`` and ``nsadmin``
(the role *admin*), and the super user ``admin`` that creates the ACLs with
AdminClient.create_acls: PREFIXED ACLs on a namespace's topic prefix, exactly the rights
:func:`~pyspark_durable.log.kafka.acls.role_rights` lists. No consumer-group ACL is ever
granted. Each role does its job on both clients with those rights, each right taken
away is an :class:`AccessDenied` naming the principal, the topic, the operation and the
ACL that grants it (never retriable, no secret), and a right granted after a refusal
works in the same process.
"""

from __future__ import annotations

import shlex
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from pyspark_durable.cli import main
from pyspark_durable.endpoint import open_namespace, read_batches, write_step
from pyspark_durable.errors import AccessDenied
from pyspark_durable.log.kafka.acls import Right, role_rights
from pyspark_durable.wal.ledger import COMMITS_LOG
from pyspark_durable.wal.replay.retention import RetentionPolicy
from pyspark_durable.wal.upkeep.cleaner import Cleaner
from tests.helpers import KAFKA_CLIENTS, wait_until
from tests.kafka_broker import Auth, KafkaCluster, authorizer_settings, cluster_for_tests

pytestmark = pytest.mark.kafka

USERS = {"reader": "reader", "writer": "writer", "cleaner": "cleaner", "admin": "nsadmin"}
# a reader per client that never had WRITE on any topic: its producer id is refused
# (CLUSTER_AUTHORIZATION_FAILED), not just its topic (WRITE on any topic grants the id)
LURKERS = {client: f"lurker_{client.replace('-', '_')}" for client in KAFKA_CLIENTS}
ACL_WAIT_S = 15.0  # an ACL change reaches the broker's authorizer within milliseconds
PLAIN_JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """One Kafka node with the authorizer on and a SASL/PLAIN user per role."""
    users = [*USERS.values(), *LURKERS.values()]
    auth = Auth(plain_users={user: "pw-" + uuid.uuid4().hex for user in users})
    with cluster_for_tests(tmp_path_factory.mktemp("kafka-acls"), 1, sasl=True, auth=auth,
                           extra=authorizer_settings(auth)) as broker:
        yield broker


def secret_of(cluster: KafkaCluster, user: str) -> str:
    assert cluster.auth is not None
    return cluster.auth.plain_logins()[user]


class Acls:
    """The super user's AdminClient: creates and deletes ACLs, and waits until the
    broker's authorizer answers with them (describe_acls asks that authorizer)."""

    def __init__(self, cluster: KafkaCluster) -> None:
        auth = cluster.auth
        assert auth is not None
        self.admin = AdminClient({"bootstrap.servers": cluster.sasl_bootstrap(),
                                  "security.protocol": "SASL_PLAINTEXT",
                                  "sasl.mechanisms": "PLAIN", "sasl.username": auth.admin_user,
                                  "sasl.password": auth.admin_password})

    @staticmethod
    def binding(user: str, right: Right) -> AclBinding:
        cluster = right.resource == "CLUSTER"
        return AclBinding(getattr(ResourceType, right.resource),
                          "kafka-cluster" if cluster else right.name,
                          ResourcePatternType.LITERAL if cluster
                          else getattr(ResourcePatternType, right.pattern),
                          f"User:{user}", "*", getattr(AclOperation, right.operation),
                          AclPermissionType.ALLOW)

    def grant(self, user: str, rights: Sequence[Right]) -> None:
        bindings = [self.binding(user, r) for r in rights]
        for future in self.admin.create_acls(bindings, request_timeout=10).values():
            future.result()
        self._wait(bindings, present=True)

    def revoke(self, user: str, rights: Sequence[Right]) -> None:
        bindings = [self.binding(user, r) for r in rights]
        filters = [AclBindingFilter(b.restype, b.name, b.resource_pattern_type, b.principal,
                                    b.host, b.operation, b.permission_type) for b in bindings]
        for future in self.admin.delete_acls(filters, request_timeout=10).values():
            future.result()
        self._wait(bindings, present=False)

    def _wait(self, bindings: list[AclBinding], present: bool) -> None:
        everything = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None,
                                      None, AclOperation.ANY, AclPermissionType.ANY)

        def applied() -> bool:  # the broker applies the controller's record: no event
            held = set(self.admin.describe_acls(everything, request_timeout=10).result())
            return all((b in held) == present for b in bindings)

        wait_until(applied, f"ACLs {'applied' if present else 'removed'}: {bindings}",
                   ACL_WAIT_S, interval_s=0.05)

    def create_topics(self, specs: dict[str, dict[str, str]]) -> None:
        new = [NewTopic(t, 1, -1, config=c) for t, c in specs.items()]
        for future in self.admin.create_topics(new, request_timeout=10).values():
            future.result()

    def ends(self, cluster: KafkaCluster, prefix: str) -> dict[str, int]:
        """Every topic of the namespace and its end offset, asked as the super user."""
        topics = sorted(t for t in self.admin.list_topics(timeout=10).topics
                        if t.startswith(prefix))
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "acl-test"})
        try:
            return {t: consumer.get_watermark_offsets(TopicPartition(t, 0), timeout=10)[1]
                    for t in topics}
        finally:
            consumer.close()


@pytest.fixture(scope="module")
def acls(cluster: KafkaCluster) -> Acls:
    return Acls(cluster)


def options(cluster: KafkaCluster, user: str, client: str) -> dict[str, Any]:
    return {"bootstrap_servers": cluster.sasl_bootstrap(), "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
            "sasl_plain_password": secret_of(cluster, user), "client": client,
            "request_timeout_ms": 10_000}


def config(cluster: KafkaCluster, ns: str, role: str, client: str,
           user: str | None = None) -> dict[str, Any]:
    return {"backend": "kafka", "namespace": ns,
            "options": options(cluster, user or USERS[role], client)}


def fresh(acls: Acls, *, without: dict[str, str] | None = None) -> str:
    """A new namespace name, each role granted its rights on it (but ``without``:
    role -> an operation left out)."""
    ns = f"acl{uuid.uuid4().hex[:10]}"
    for role, user in USERS.items():
        rights = [r for r in role_rights(ns, role)
                  if (without or {}).get(role) != r.operation]
        acls.grant(user, rights)
    return ns


ROWS = pa.table({"id": [1, 2, 3]})


def with_ns(cluster: KafkaCluster, ns: str, role: str, client: str, job: Callable[[Any], Any],
            create: bool = True) -> Any:
    handle = open_namespace(config(cluster, ns, role, client), create=create)
    try:
        return job(handle)
    finally:
        handle.close()


def created(cluster: KafkaCluster, ns: str, client: str) -> None:
    """The admin role creates the namespace and its two regions."""
    for region in (0, 1):
        with_ns(cluster, ns, "admin", client,
                lambda h, r=region: write_step(h, "loader", r, {"t": ROWS}, region_id=r))


def rows(cluster: KafkaCluster, ns: str, role: str, client: str) -> int:
    return with_ns(cluster, ns, role, client,
                   lambda h: sum(b.num_rows for b in read_batches(h, "t")), create=False)


def refused(cluster: KafkaCluster, caught: pytest.ExceptionInfo, user: str, operation: str,
            topic: str) -> AccessDenied:
    """The refusal names the principal, the topic, the operation and the ACL, is not
    retriable, and shows no secret."""
    exc = caught.value
    assert isinstance(exc, AccessDenied), repr(exc)
    assert not exc.retriable
    text = str(exc)
    assert exc.principal == f"User:{user}" and exc.operation == operation, text
    assert f"User:{user}" in text and operation in text and topic in text, text
    assert "kafka-acls.sh" in text and f"--allow-principal User:{user}" in text, text
    assert cluster.auth is not None
    for secret in cluster.auth.plain_logins().values():
        assert secret not in text
    return exc


# -- each role, its job, with exactly its rights --------------------------------------


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_each_role_does_its_job_with_exactly_its_rights(cluster, acls, client):
    """This tests that, with only the PREFIXED ACLs role_rights lists (and no group ACL),
    the admin creates a 2-region namespace, the writer writes steps to both regions, the
    reader reads every row and writes nothing (no topic, no record, no config), and the
    cleaner expires and deletes (DeleteRecords) on both clients."""
    ns = fresh(acls)
    created(cluster, ns, client)
    for step in (2, 3):
        with_ns(cluster, ns, "writer", client,
                lambda h, s=step: write_step(h, "loader", s, {"t": ROWS}, region_id=s % 2))
    before = acls.ends(cluster, f"{ns}_")
    assert rows(cluster, ns, "reader", client) == 12
    with_ns(cluster, ns, "reader", client, lambda h: h.steps(), create=False)
    assert acls.ends(cluster, f"{ns}_") == before  # the reader wrote nothing

    def clean(h: Any) -> Any:
        h.set_retention(RetentionPolicy(max_steps=1))
        return Cleaner(h, grace_ms=0).run_once()

    with_ns(cluster, ns, "cleaner", client, clean)
    assert rows(cluster, ns, "reader", client) == 3
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "acl-test"})
    try:  # DeleteRecords moved the log start of the regions whose steps expired
        starts = [consumer.get_watermark_offsets(TopicPartition(f"{ns}_region_{r}", 0),
                                                 timeout=10)[0] for r in (0, 1)]
    finally:
        consumer.close()
    assert max(starts) > 0, starts


# -- each right taken away: a typed refusal -------------------------------------------


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_missing_right_is_a_typed_refusal_naming_the_acl(cluster, acls, client):
    """This tests that each role without the right its job needs fails with AccessDenied
    (not retriable, not BackendUnavailable) naming the principal, the topic, the
    operation and the kafka-acls.sh line that grants it: the admin without CREATE, the
    writer without WRITE (a refusal, not a retriable append failure), the cleaner
    without DELETE, the reader without READ, and the admin without ALTER_CONFIGS on an
    empty topic made with the broker's 7-day retention (which it would fix)."""
    ns = fresh(acls, without={"admin": "CREATE"})
    with pytest.raises(AccessDenied) as caught:
        created(cluster, ns, client)
    refused(cluster, caught, "nsadmin", "CREATE", f"{ns}_")

    ns = fresh(acls, without={"admin": "ALTER_CONFIGS"})
    acls.create_topics({f"{ns}_commits": {}})  # the broker's defaults: retention.ms 7 days
    with pytest.raises(AccessDenied) as caught:
        created(cluster, ns, client)
    refused(cluster, caught, "nsadmin", "ALTER_CONFIGS", f"{ns}_commits")

    ns = fresh(acls, without={"writer": "WRITE", "cleaner": "DELETE", "reader": "READ"})
    created(cluster, ns, client)
    with pytest.raises(AccessDenied) as caught:
        with_ns(cluster, ns, "writer", client,
                lambda h: write_step(h, "loader", 9, {"t": ROWS}))
    refused(cluster, caught, "writer", "WRITE", f"{ns}_")
    with pytest.raises(AccessDenied) as caught:
        rows(cluster, ns, "reader", client)
    refused(cluster, caught, "reader", "READ", f"{ns}_")

    def clean(h: Any) -> Any:
        h.set_retention(RetentionPolicy(max_steps=1))
        return Cleaner(h, grace_ms=0).run_once()

    with pytest.raises(AccessDenied) as caught:
        with_ns(cluster, ns, "cleaner", client, clean)
    refused(cluster, caught, "cleaner", "DELETE", f"{ns}_region_")


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_without_describe_configs_retention_cannot_be_checked(cluster, acls, client, capsys):
    """This tests that a writer without DESCRIBE_CONFIGS gets AccessDenied saying the
    retention settings cannot be checked (never a false 'retention.ms=None' alarm, never
    a raw ValueError), and that ``durablewal check`` as that principal reports the same
    refusal (exit 2) instead of retention problems, while the reader's check is OK."""
    ns = fresh(acls, without={"writer": "DESCRIBE_CONFIGS"})
    created(cluster, ns, client)
    with pytest.raises(AccessDenied) as caught:
        with_ns(cluster, ns, "writer", client,
                lambda h: write_step(h, "loader", 5, {"t": ROWS}))
    exc = refused(cluster, caught, "writer", "DESCRIBE_CONFIGS", f"{ns}_")
    assert "cannot be checked" in str(exc) and "=None" not in str(exc)

    def check(user: str) -> tuple[int, str, str]:
        code = main(["check", "--namespace", ns, "--kafka-config",
                     str(login_file(cluster, user)), "--kafka-option", f"client={client}"])
        out, err = capsys.readouterr()
        assert cluster.auth is not None
        for secret in cluster.auth.plain_logins().values():
            assert secret not in out + err
        return code, out, err

    code, out, err = check("writer")
    assert code == 2, out + err
    assert "DESCRIBE_CONFIGS" in err and "cannot be checked" in err, err
    assert "retention.ms=None" not in out + err
    code, out, err = check("reader")
    assert code == 0, out + err


def login_file(cluster: KafkaCluster, user: str) -> Path:
    """A --kafka-config file (Kafka's --command-config) logging in as ``user``."""
    path = cluster.nodes[0].folder.parent / f"{user}.properties"
    path.write_text(f"bootstrap.servers={cluster.sasl_bootstrap()}\n"
                    "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                    f'sasl.jaas.config={PLAIN_JAAS} required username="{user}" '
                    f'password="{secret_of(cluster, user)}";\n')
    return path


# -- a reader that registers its position; a refusal healed in the same process --------


@pytest.mark.backends("kafka-confluent", "kafka-python")
def test_a_registered_reader_needs_write_on_the_commits_topic_only(cluster, acls, client):
    """This tests that a reader registering its position (readerId) without WRITE is
    refused with AccessDenied naming WRITE (librdkafka's fatal 'Failed to acquire
    idempotence PID' included), that after WRITE is granted on the commits topic alone
    (a LITERAL ACL) the same process registers (the client the refusal left fatal was
    replaced, not reused), and that the one record is all it wrote."""
    ns = fresh(acls)
    created(cluster, ns, client)
    lurker = LURKERS[client]
    acls.grant(lurker, role_rights(ns, "reader"))
    handle = open_namespace(config(cluster, ns, "reader", client, lurker), create=False)
    try:
        before = acls.ends(cluster, f"{ns}_")
        with pytest.raises(AccessDenied) as caught:
            handle.commit_reader("dashboard", 1)
        exc = refused(cluster, caught, lurker, "WRITE", f"{ns}_commits")
        assert "CLUSTER_AUTHORIZATION_FAILED" in str(exc)  # the producer id was refused
        extra = [r for r in role_rights(ns, "reader", COMMITS_LOG)
                 if r not in role_rights(ns, "reader")]
        assert extra == [Right("WRITE", pattern="LITERAL", name=f"{ns}_commits")]
        acls.grant(lurker, extra)
        handle.commit_reader("dashboard", 1)
        assert handle.info.reader_position("dashboard") is not None
        after = acls.ends(cluster, f"{ns}_")
        assert {t: after[t] - before[t] for t in after if after[t] != before[t]} == \
            {f"{ns}_commits": 1}
    finally:
        handle.close()


# -- pre-created topics, from what `durablewal kafka acls` prints -----------------------


def kafka_tools(cluster: KafkaCluster, lines: list[str]) -> None:
    """Run printed ``kafka-acls.sh``/``kafka-topics.sh`` lines with Kafka's own tools
    (AclCommand, TopicCommand), side by side: each is a JVM start."""
    tools = {"kafka-acls.sh": "org.apache.kafka.tools.AclCommand",
             "kafka-topics.sh": "org.apache.kafka.tools.TopicCommand"}
    runs = []
    for line in lines:
        script, *args = shlex.split(line)
        runs.append((line, subprocess.Popen(
            ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
             "-cp", cluster.classpath, tools[script], *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
    for line, proc in runs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{line}\n{out}"


def test_printed_acls_and_topics_let_a_writer_without_create_work(cluster, acls, capsys,
                                                                   tmp_path):
    """This tests that the lines ``durablewal kafka acls`` prints, run with Kafka's own
    kafka-acls.sh and kafka-topics.sh tools (AclCommand, TopicCommand) as the super user,
    let a writer with no CREATE right write to a namespace on topics an admin made, and a
    reader with --reader-id register its position, on the default client."""
    auth = cluster.auth
    assert auth is not None
    admin_conf = tmp_path / "admin.properties"
    admin_conf.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f'sasl.jaas.config={PLAIN_JAAS} required username="{auth.admin_user}"'
                          f' password="{auth.admin_password}";\n')
    ns = f"pre{uuid.uuid4().hex[:10]}"
    lines = []
    for role, extra in (("writer", []), ("reader", ["--reader-id"])):
        assert main(["kafka", "acls", "--namespace", ns, "--principal", f"User:{USERS[role]}",
                     "--role", role, *extra, "--regions", "1", "--bootstrap-servers",
                     cluster.sasl_bootstrap(), "--command-config", str(admin_conf)]) == 0
        lines += capsys.readouterr().out.splitlines()
    commands = [line for line in lines if not line.startswith("#")]
    acl_lines = [c for c in commands if c.startswith("kafka-acls.sh")]
    topic_lines = sorted({c for c in commands if c.startswith("kafka-topics.sh")})
    assert len(acl_lines) == 3 and len(topic_lines) == 3, lines  # commits, region_0, snapshots
    kafka_tools(cluster, [*acl_lines, *topic_lines])
    client = "confluent"
    assert with_ns(cluster, ns, "writer", client,
                   lambda h: write_step(h, "loader", 0, {"t": ROWS})) == 0
    assert rows(cluster, ns, "reader", client) == 3
    with_ns(cluster, ns, "reader", client, lambda h: h.commit_reader("dashboard", 1),
            create=False)
    with pytest.raises(AccessDenied) as caught:  # region 1 was not made: CREATE is named
        with_ns(cluster, ns, "writer", client,
                lambda h: write_step(h, "loader", 1, {"t": ROWS}, region_id=1))
    refused(cluster, caught, "writer", "CREATE", f"{ns}_region_1")


# -- Spark ------------------------------------------------------------------------------


@pytest.mark.spark
def test_spark_reads_as_the_reader_and_writes_nothing(cluster, acls, spark_session):
    """This tests that a Spark batch read with the reader principal (READ, DESCRIBE,
    DESCRIBE_CONFIGS only) returns every row, and that no topic of the namespace got a
    record from it (Spark's driver and its Python workers open the namespace)."""
    ns = fresh(acls)
    created(cluster, ns, "confluent")
    before = acls.ends(cluster, f"{ns}_")
    read = spark_session.read.format("durablewal").options(
        backend="kafka", namespace=ns, **{f"kafka.{k}": str(v) for k, v in
                                          options(cluster, "reader", "confluent").items()})
    assert sorted(r.id for r in read.load().select("id").collect()) == [1, 1, 2, 2, 3, 3]
    assert acls.ends(cluster, f"{ns}_") == before
