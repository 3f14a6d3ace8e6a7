"""Spark adapters: the ``durablewal`` data source. Knows nothing of Kafka or files."""

from pyspark_durable.spark.datasource import DurableWalDataSource
from pyspark_durable.spark.options import OPTIONS, WalOptions

__all__ = ["OPTIONS", "DurableWalDataSource", "WalOptions"]
