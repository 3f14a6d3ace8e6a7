"""One SparkSession (local[2]) for every Spark test of the run."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from spark_settings import spark_builder

import pyspark_durable


@pytest.fixture(scope="session")
def spark() -> Iterator:
    session = spark_builder().getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(session)
    yield session
    session.stop()


@pytest.fixture(params=["file", "kafka"])
def wal(request, tmp_path) -> dict:
    """Reader/writer options of a fresh namespace on one backend."""
    ns = f"s{uuid.uuid4().hex[:10]}"
    if request.param == "file":
        return {"namespace": ns, "path": str(tmp_path / "wal")}
    broker = request.getfixturevalue("kafka_broker")
    return {"namespace": ns, "backend": "kafka", "kafka.bootstrap.servers": broker}
