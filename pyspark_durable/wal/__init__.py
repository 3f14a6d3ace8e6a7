"""The WAL layer: namespaces, tables in regions, sequences, atomic idempotent steps.

See :mod:`pyspark_durable.wal.namespace` for the commit protocol and
:mod:`pyspark_durable.wal.upkeep.cleaner` for retention; :mod:`pyspark_durable.wal.replay.clocks`
for the clock rules no single host's clock can push.
"""

from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.format.receipts import AttemptReceipt, WrittenEntry
from pyspark_durable.wal.format.records import StepCommit, TableInfo
from pyspark_durable.wal.format.runs import Run
from pyspark_durable.wal.namespace import DEFAULT_TABLE, Namespace
from pyspark_durable.wal.reading import StepBatch
from pyspark_durable.wal.replay.retention import RetentionPolicy
from pyspark_durable.wal.tables import table_id_for_name
from pyspark_durable.wal.upkeep.cleaner import Cleaner, CleanReport

__all__ = [
    "DEFAULT_TABLE",
    "Attempt",
    "AttemptReceipt",
    "CleanReport",
    "Cleaner",
    "Namespace",
    "RetentionPolicy",
    "Run",
    "StepBatch",
    "StepCommit",
    "TableInfo",
    "WrittenEntry",
    "table_id_for_name",
]
