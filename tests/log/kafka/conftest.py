"""Fixtures the Kafka tests outside tests/spark share."""

from __future__ import annotations

import pytest


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
