"""pyspark_durable: a durable, exactly-once write-ahead log for Spark Structured Streaming.

Installed, it needs no set-up: Spark 4 finds its ``DefaultSource`` and
``spark.read.format("durablewal")`` works in any new session. A package shipped with a
job as a zip (not installed) is registered by hand:

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


def __getattr__(name: str) -> Any:
    """``DefaultSource``, imported only when asked for: Spark 4 looks it up in every
    installed ``pyspark_*`` package and registers it, so no ``register`` call is needed
    where the package is installed (``register`` stays for a package shipped as a zip)."""
    if name == "DefaultSource":
        from pyspark_durable.spark import DurableWalDataSource

        return DurableWalDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DefaultSource", "DurableWalError", "__version__", "register"]
