"""pyspark_durable: a durable, exactly-once write-ahead log for Spark Structured Streaming.

>>> import pyspark_durable
>>> pyspark_durable.register(spark)   # then format("durablewal")
"""

from __future__ import annotations

from typing import Any

from pyspark_durable.errors import DurableWalError

__version__ = "0.1.0"


def register(spark: Any) -> None:
    """Register the ``durablewal`` data source with a SparkSession."""
    from pyspark_durable.spark import DurableWalDataSource

    spark.dataSource.register(DurableWalDataSource)


__all__ = ["DurableWalError", "__version__", "register"]
