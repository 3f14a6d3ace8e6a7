"""Fixtures the Kafka tests outside tests/spark share."""

from __future__ import annotations

import sys

import pytest
from helpers import TESTS


@pytest.fixture(scope="session")
def spark_session():
    """The suite's SparkSession (created here when no other test made it first: these
    modules alone, or a pytest-xdist worker that runs no other Spark test before them;
    kept for the rest of the session either way, not started again per module)."""
    sys.path.insert(0, str(TESTS / "spark"))
    from pyspark.sql import SparkSession
    from spark_settings import spark_builder

    import pyspark_durable

    existing = SparkSession.getActiveSession()
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(session)
    yield session
    if existing is None:
        session.stop()
