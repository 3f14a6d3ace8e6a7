"""Spark session settings shared by the test session and the crash-test children."""

from __future__ import annotations

import os
import sys


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
