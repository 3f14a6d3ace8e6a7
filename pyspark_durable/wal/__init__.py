"""The WAL layer: namespaces, tables in regions, sequences, atomic idempotent steps.

Use, in code order (a writer's step begins, writes, commits; a reader reads steps)::

    ns = Namespace(open_store("file", "orders", path="/data/wal"))
    attempt = ns.begin("ingest", 0)                     # writer "ingest", its step 0
    attempt.write("orders", pa.table({"id": [1, 2]}))   # durable, invisible
    receipt = attempt.receipt()                         # what the attempt hands on
    step = ns.commit("ingest", 0, [receipt])            # the commit point; idempotent
    for s in ns.steps():                                # committed, still readable
        for batch in ns.read_step(s):                   # rows with where they came from
            print(batch.table_id, batch.sequence_num, batch.batches)
    ns.expire(step + 1)                                 # steps below are not needed
    Cleaner(ns).run_once()                              # deletes what nothing needs

Code outside ``wal/`` opens a :class:`Namespace` and asks it: its tables
(``ns.tables``), its answers (``ns.info``), its reads and its writes. What it is made
of lies in three rings below it, each importing only the rings listed before it:
``format/`` (what is written) knows nothing else of the WAL, ``replay/`` (how the log
becomes state) reads ``format/``, the top modules drive both, and ``upkeep/`` (what runs
beside the writers) drives the top through the namespace's :class:`~.ledger.Ledger`. The
modules, and what each is for:

=================================  ========================================================
module                             for
=================================  ========================================================
``namespace``                      the commit protocol (rules 1-8) and the handle on one WAL
``ledger``                         the commits log, its replayed state, lock and healing
``arguments``                      typed errors for writer ids, steps and sequences
``attempt``                        one writer attempt: entries written, invisible until commit
``tables``                         the table catalog: names to ids, definitions, versions
``reading``                        the read path: a step's entries, checked against its runs
``queries``                        what a namespace answers about itself (``info``), frozen
``metadata``                       the columns a reader gets beside a table's rows
``reserve``                        room on a full disk for the records that free space
``failpoints``                     named points in the protocols where tests pause or kill
``progress``                       how a long pass (check, clean) reports its progress
``format.records``                 the ``commits`` log's record kinds and their JSON
``format.commit_record``           a commits record's base class and the registry of kinds
``format.table_records``           the records that define tables, and a table as replayed
``format.runs``                    a step's runs and their compact stored form
``format.receipts``                what a writer attempt hands its committer
``format.schemas``                 schema evolution: which versions may follow which
``format.snapshot_file``           the checked envelope a snapshot is stored in
``format.columns``                 a snapshot's Arrow blocks, read as columns row by row
``replay.state``                   the state replay rebuilds: recovery, one handler per kind
``replay.stored_state``            what that state holds, which steps it needs, its snapshots
``replay.copies``                  each commits record written twice, and read back once
``replay.step_index``              which commits record is step *n*, in chunks
``replay.chunk_table``             the step index's chunks as a snapshot stores them
``replay.dedup``                   which ``(writer, writer_step)`` pairs replay remembers
``replay.oneoff_block``            the one-off writers a snapshot remembers, as columns
``replay.clocks``                  the WAL's clock, which no single host can push
``replay.retention``               the retention policy: which steps are no longer needed
``replay.snapshot_schedule``       when a committer writes a snapshot
``upkeep.cleaner``                 the cleaner: expire, record a bound, delete, snapshot
``upkeep.check``                   the integrity check (``durablewal check``)
``upkeep.check_regions``           the check's pass over the region logs, entry by entry
``upkeep.check_report``            what the check found, with coordinates
``upkeep.repair``                  what check finds lost recorded as lost (``durablewal repair``)
``upkeep.backup``                  a consistent copy of a running file-log namespace (``durablewal backup``)
=================================  ========================================================
"""

from pyspark_durable.wal.attempt import Attempt
from pyspark_durable.wal.format.receipts import AttemptReceipt, WrittenEntry
from pyspark_durable.wal.format.records import StepCommit
from pyspark_durable.wal.format.runs import Run
from pyspark_durable.wal.format.table_records import TableInfo
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
