"""Fixtures the Kafka tests outside tests/spark share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka_broker import KafkaCluster, cluster_for_tests
from tests.netproxy import Proxy, proxies


@pytest.fixture(scope="session")
def spark_session():
    """The suite's SparkSession (created here when no other test made it first: these
    modules alone, or a pytest-xdist worker that runs no other Spark test before them;
    kept for the rest of the session either way, not started again per module)."""
    from pyspark.sql import SparkSession

    import pyspark_durable
    from tests.spark.spark_settings import spark_builder

    existing = SparkSession.getActiveSession()
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(session)
    yield session
    if existing is None:
        session.stop()


@pytest.fixture(scope="session")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KafkaCluster, Proxy]]:
    """One broker whose advertised listener is a proxy (clients reach it only so)."""
    with proxies() as p:
        with cluster_for_tests(tmp_path_factory.mktemp("kafka-proxied"),
                               advertise=lambda node: p.add(node.port).port) as cluster:
            yield cluster, p.all()[0]


@pytest.fixture
def link(proxied) -> Iterator[Proxy]:
    """The proxy, forwarding again after each test."""
    proxy = proxied[1]
    proxy.set("forward")
    yield proxy
    proxy.set("forward")
