"""How a Kafka option's key is spelled: one rule, so YAML, Spark options and Python
keywords all work. A key may carry a ``kafka.`` prefix, and ``.``/``-`` count as ``_``:
``kafka.bootstrap.servers``, ``bootstrap.servers`` and ``bootstrap_servers`` are one
option. :mod:`~pyspark_durable.log.kafka.settings` and
:mod:`~pyspark_durable.log.kafka.auth` both read keys this way.
"""

from __future__ import annotations


def normalize_key(key: str) -> str:
    """``kafka.bootstrap.servers`` -> ``bootstrap_servers`` (see the module docstring)."""
    if key.startswith("kafka."):
        key = key[len("kafka.") :]
    return key.replace(".", "_").replace("-", "_")
