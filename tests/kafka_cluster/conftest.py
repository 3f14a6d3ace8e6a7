"""Fixtures of the replicated-Kafka tests: one 3-node KRaft cluster and one SparkSession
per pytest process, and helpers that find partition leaders and wait on Spark events.

The cluster is Apache Kafka itself (tests/kafka_broker.py): three combined
broker+controller nodes, ``default.replication.factor=3``, ``min.insync.replicas=2``.
Tests kill nodes with ``kill -9`` by the PIDs the cluster started; after each test every
node is running again (:func:`all_nodes_up`), so a failing test does not leave the next
one a degraded cluster.

Two settings are what operators run and tests rely on: Eligible Leader Replicas
(``eligible.leader.replicas.version=1``, the default of a new cluster since Kafka 4.1)
is set at format time, so the cluster keeps it whatever the release's default; and
every node loads the client-telemetry receiver ``TelemetryLog.java`` (compiled here), since
a broker offers clients the telemetry requests of KIP-714 only with a receiver
configured. Without a client-metrics subscription no client pushes anything.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import pyspark_durable
from tests.kafka_broker import KafkaCluster, cluster_for_tests, kafka_classpath
from tests.kafka_cluster.kafka_cluster_tools import FAILURE_DETECTION, restart_all
from tests.netproxy import Proxies, proxies
from tests.spark.progress_events import ProgressEvents

# modest heaps: other test processes run brokers and Spark on this 2-core machine too
CLUSTER_HEAP = ("-Xms128m", "-Xmx512m")


@pytest.fixture(scope="package")
def net() -> Iterator[Proxies]:
    """One TCP proxy in front of each node's client listener (tests/netproxy.py)."""
    with proxies() as p:
        yield p


ELR = {"eligible.leader.replicas.version": 1}
RECEIVER = Path(__file__).resolve().parent / "TelemetryLog.java"


@pytest.fixture(scope="package")
def telemetry_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the compiled receiver's folder, the folder it writes a ``telemetry-NODE.tsv`` per
    node into): one line per client telemetry push a node accepted."""
    classes, pushes = tmp_path_factory.mktemp("telemetry-classes"), tmp_path_factory.mktemp("pushes")
    done = subprocess.run(["javac", "-cp", kafka_classpath(), "-d", str(classes), str(RECEIVER)],
                          capture_output=True, text=True)
    assert done.returncode == 0, f"javac {RECEIVER.name} failed:\n{done.stdout}{done.stderr}"
    return classes, pushes


@pytest.fixture(scope="package")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory, net: Proxies,
                  telemetry_log: tuple[Path, Path]) -> Iterator[KafkaCluster]:
    """Three KRaft nodes on 127.0.0.1, stopped by PID after the folder's last test (idle
    brokers of three JVMs would cost the rest of the run CPU). Clients
    reach them only through ``net``'s proxies (forwarding unless a test cuts them); the
    nodes talk to each other directly. A killed node is fenced within seconds
    (``FAILURE_DETECTION``). ELR on, telemetry received (module docstring)."""
    classes, pushes = telemetry_log
    receiver = {"metric.reporters": "TelemetryLog", "telemetry.log.dir": str(pushes)}
    with cluster_for_tests(tmp_path_factory.mktemp("kafka3"), 3, heap=CLUSTER_HEAP,
                           extra={**FAILURE_DETECTION, **receiver}, features=ELR,
                           classpath_extra=(str(classes),),
                           advertise=lambda node: net.add(node.port).port) as cluster:
        yield cluster  # restarts use its heap and classpath too


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
    from tests.spark.spark_settings import spark_builder

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
