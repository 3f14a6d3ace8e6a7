"""A local SparkSession set up for pyspark_durable (demo, notebook, examples)."""

from __future__ import annotations

import os
import sys
from importlib import resources
from typing import Any


def local_session(app_name: str = "durablewal", quiet: bool = True, **conf: Any):
    """Start (or get) a local[2] SparkSession with ``durablewal`` registered.

    Spark starts Python workers with ``python3`` unless told; pointing it at this
    interpreter avoids "Python worker failed to connect back".
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import pyspark_durable

    builder = (SparkSession.builder.master("local[2]").appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    if quiet:
        log4j = resources.files("pyspark_durable") / "resources" / "log4j2.properties"
        builder = builder.config("spark.driver.extraJavaOptions",
                                 f"-Dlog4j2.configurationFile=file:{log4j}")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if quiet:
        spark.sparkContext.setLogLevel("ERROR")
    pyspark_durable.register(spark)
    return spark
