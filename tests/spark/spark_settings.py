"""Spark session settings shared by the test session and the crash-test children."""

from __future__ import annotations

import os
import sys

# Every JVM of the suite runs small jobs on 2 cores, beside the other worker's: the C1
# compiler alone (no C2 compiling in the background) and the serial collector cost a
# third less CPU, for a child's one Spark start and a few micro-batches (37 -> 24 s of
# JVM CPU for a start and three small jobs) as for a worker's session that runs a whole
# module (test_spark_datasource.py: 331 -> 236 s of CPU, the children's included).
# The suite hands them to every spark-submit it starts, in process or in a child (a
# demo, a notebook's kernel, the Connect server), through SPARK_SUBMIT_OPTS
# (tests/conftest.py); tests/cluster's daemons and executors take them by their own
# settings.
TEST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_builder():
    """Session settings shared by the tests and the crash-test children."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # else workers start `python3`
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2,3]")  # 2 cores; a failed task is retried
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.streaming.stopTimeout", "30s")
            .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=error")
            .config("spark.python.worker.faulthandler.enabled", "true"))
