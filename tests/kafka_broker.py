"""Apache Kafka itself (KRaft, no ZooKeeper) for tests and benchmarks.

The brokers are started by the package's one implementation,
:mod:`pyspark_durable.showcase.localkafka.cluster` (the same that ``durablewal kafka start``
uses); read its docstring for the jars, listeners, logs and kills. Every broker a test
starts is *attached* to the test process: it dies with it, ``kill -9`` included, so a
crashed run leaves no orphan broker behind. This module adds what only tests need: the
throwaway TLS certificate authority (:mod:`kafka_tls`) and a pytest fixture helper that
fails, never skips, when a broker does not start.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark_durable.showcase.localkafka.cluster import KafkaCluster, random_cluster_id, wait_ready
from pyspark_durable.showcase.localkafka.cluster import start_cluster as _start_cluster
from pyspark_durable.showcase.localkafka.node import HEAP, BrokerStartError, Node
from pyspark_durable.showcase.localkafka.ports import free_port
from pyspark_durable.showcase.localkafka.settings import Auth
from tests.kafka_maven import kafka_classpath

__all__ = [
    "HEAP",
    "Auth",
    "BrokerStartError",
    "KafkaCluster",
    "Node",
    "free_port",
    "kafka_classpath",
    "random_cluster_id",
    "wait_ready",
    "start_cluster",
    "cluster_for_tests",
    "authorizer_settings",
    "start_broker",
    "stop_broker",
    "kill_broker",
    "topic_bytes",
]


def start_cluster(
    work_dir: Path, size: int = 1, *, tls: bool = False, auth: Auth | None = None, **kwargs
) -> KafkaCluster:
    """:func:`pyspark_durable.showcase.localkafka.cluster.start_cluster`, with a test CA made for
    a TLS listener (:func:`kafka_tls.make_ca_and_server`) when ``auth`` has none."""
    if tls:
        auth = auth or Auth()
        if auth.tls_dir is None:
            from tests.kafka_tls import make_ca_and_server

            auth.tls_dir = make_ca_and_server(work_dir / "tls", auth.keystore_password)
    kwargs.setdefault("classpath", kafka_classpath())  # Maven's, not the package's fetch
    return _start_cluster(work_dir, size, tls=tls, auth=auth, **kwargs)


AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def authorizer_settings(auth: Auth) -> dict[str, str]:
    """``extra`` broker settings that turn on Kafka's StandardAuthorizer: only the admin
    user, and the nodes' own PLAINTEXT principal ``User:ANONYMOUS`` (controller and
    inter-broker requests pass the authorizer too), may do anything without an ACL;
    the other users of :attr:`Auth.plain_users` get the ACLs the test creates."""
    return {"authorizer.class.name": AUTHORIZER,
            "super.users": f"User:{auth.admin_user};User:ANONYMOUS"}


@contextmanager
def cluster_for_tests(work_dir: Path, size: int = 1, **kwargs) -> Iterator[KafkaCluster]:
    """A started cluster for a pytest fixture: a start that fails fails the tests that
    need it, loudly, with the broker's log (never a skip); stopped by PID at the end."""
    import pytest

    try:
        cluster = start_cluster(work_dir, size, **kwargs)
    except BrokerStartError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop()


# -- the single-broker names the suite and the benchmark use -------------------------

Broker = KafkaCluster


def start_broker(work_dir: Path, **kwargs) -> KafkaCluster:
    """One KRaft node (broker and controller) with a user's default settings."""
    return start_cluster(work_dir, 1, **kwargs)


def stop_broker(broker: KafkaCluster) -> None:
    broker.stop()


def kill_broker(broker: KafkaCluster) -> None:
    """``kill -9`` every node of the cluster (a broker gone without a goodbye)."""
    for node in broker.nodes:
        broker.kill(node.node_id)


def topic_bytes(cluster: KafkaCluster, prefix: str) -> bytes:
    """Every key, value and header of every topic of namespace ``prefix``, read raw over
    the PLAINTEXT listener: what a search for a leaked secret must cover."""
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(prefix + "_")]
    assert topics, f"no topics of {prefix}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "raw-reader",
                         "enable.auto.commit": "false", "enable.partition.eof": "true"})
    data = bytearray()
    try:
        for topic in topics:
            consumer.assign([TopicPartition(topic, 0, 0)])
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
            seen = low
            while seen < high:
                msg = consumer.poll(5)
                assert msg is not None, f"{topic} stopped at {seen} of {high}"
                if msg.error() is not None:
                    continue
                data += (msg.key() or b"") + (msg.value() or b"")
                for k, v in msg.headers() or ():
                    data += k.encode() + (v or b"")
                seen = msg.offset() + 1
    finally:
        consumer.close()
    return bytes(data)
