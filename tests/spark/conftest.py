"""One SparkSession (local[2]) for every Spark test of the run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import pyspark_durable
from tests.spark.spark_settings import spark_builder


@pytest.fixture(scope="session")
def spark() -> Iterator:
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(session)
    yield session
    session.stop()

