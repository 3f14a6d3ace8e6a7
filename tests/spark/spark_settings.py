"""Spark session settings shared by the test session and the crash-test children."""

from __future__ import annotations

import os
import sys

# A child's JVM lives for one Spark start and a few micro-batches: the C1 compiler alone
# (no C2 compiling in the background) and the serial collector start it with about a
# third less CPU (measured on a loaded machine: 37 -> 24 s of JVM CPU for a start and
# three small jobs), as tests/cluster's short-lived JVMs do. The suite's own long-lived
# session keeps the defaults.
SHORT_LIVED_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_builder(short_lived: bool = False):
    """Session settings shared by the tests and the crash-test children (``short_lived``:
    a child's JVM, started with :data:`SHORT_LIVED_JVM`)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable  # else workers start `python3`
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    return (SparkSession.builder.master("local[2,3]")  # 2 cores; a failed task is retried
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.session.timeZone", "UTC")
            .config("spark.sql.streaming.stopTimeout", "30s")
            .config("spark.driver.extraJavaOptions",
                    "-Dlog4j2.level=error" + (" " + SHORT_LIVED_JVM if short_lived else ""))
            .config("spark.python.worker.faulthandler.enabled", "true"))
