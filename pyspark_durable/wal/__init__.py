"""The WAL layer: namespaces, tables in regions, sequences, atomic idempotent steps.

See :mod:`pyspark_durable.wal.namespace` for the commit protocol and
:mod:`pyspark_durable.wal.cleaner` for retention; :mod:`pyspark_durable.wal.clocks`
for the clock rules no single host's clock can push.
"""

from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.cleaner import Cleaner, CleanReport
from pyspark_durable.wal.namespace import DEFAULT_TABLE, Namespace
from pyspark_durable.wal.reading import StepBatch
from pyspark_durable.wal.receipts import AttemptReceipt, WrittenEntry
from pyspark_durable.wal.records import StepCommit, TableInfo
from pyspark_durable.wal.retention import RetentionPolicy
from pyspark_durable.wal.runs import Run
from pyspark_durable.wal.tables import table_id_for_name

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
