"""Fixtures of the replicated-Kafka tests: one 3-node KRaft cluster and one SparkSession
per pytest process, and helpers that find partition leaders and wait on Spark events.

The cluster is Apache Kafka itself (tests/kafka_broker.py): three combined
broker+controller nodes, ``default.replication.factor=3``, ``min.insync.replicas=2``.
Tests kill nodes with ``kill -9`` by the PIDs the cluster started; after each test every
node is running again (:func:`all_nodes_up`), so a failing test does not leave the next
one a degraded cluster.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kafka_broker import KafkaCluster, cluster_for_tests
from kafka_cluster_tools import FAILURE_DETECTION, restart_all
from netproxy import Proxies, proxies
from progress_events import ProgressEvents

import pyspark_durable

# modest heaps: other test processes run brokers and Spark on this 2-core machine too
CLUSTER_HEAP = ("-Xms128m", "-Xmx512m")


@pytest.fixture(scope="session")
def net() -> Iterator[Proxies]:
    """One TCP proxy in front of each node's client listener (tests/netproxy.py)."""
    with proxies() as p:
        yield p


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory, net: Proxies) -> Iterator[KafkaCluster]:
    """Three KRaft nodes on 127.0.0.1, stopped by PID at the end of the session. Clients
    reach them only through ``net``'s proxies (forwarding unless a test cuts them); the
    nodes talk to each other directly. A killed node is fenced within seconds
    (``FAILURE_DETECTION``)."""
    with cluster_for_tests(tmp_path_factory.mktemp("kafka3"), 3, heap=CLUSTER_HEAP,
                           extra=FAILURE_DETECTION,
                           advertise=lambda node: net.add(node.port).port) as cluster:
        yield cluster  # restarts use its heap too


@pytest.fixture(autouse=True)
def all_nodes_up(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test of the cluster, every link forwards and every node runs again
    (restarted if killed)."""
    yield
    if "kafka_cluster" not in request.fixturenames:
        return
    request.getfixturevalue("net").set_all("forward")
    cluster: KafkaCluster = request.getfixturevalue("kafka_cluster")
    down = [n.node_id for n in cluster.nodes if not n.alive()]
    restart_all(cluster, down)


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """One SparkSession (local[2]) per pytest process, with tests/spark's settings."""
    from spark_settings import spark_builder

    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(session)
    yield session
    session.stop()


@pytest.fixture
def progress(spark) -> Iterator[ProgressEvents]:
    p = ProgressEvents()
    spark.streams.addListener(p)
    yield p
    spark.streams.removeListener(p)
