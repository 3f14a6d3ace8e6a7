"""``durablewal repair``: what ``check`` found lost is recorded as lost, in the WAL itself.

A damaged entry cannot be rebuilt from anything the WAL keeps (an entry is written
once; its step holds only its digest), and a step numbered by a commits record whose
copies are both damaged cannot be renumbered without a guess. So a repair rebuilds what
the WAL can rebuild and records the rest:

1. ``check`` runs, and each step it names as lost (an entry it needs is damaged) gets a
   ``lost`` record (:class:`LostRecord`) with what was lost. From then on a read of the
   step is :class:`~pyspark_durable.errors.StepLost` naming it, ``check`` lists it as a
   warning (exit 0), and every other step reads as before.
2. A damaged snapshot is rewritten by one cleaner pass (it writes a good one in its
   place and deletes the damaged one).
3. What only a backup holds (a lost commits record) is reported, never recorded.

It is idempotent (a step already recorded gets no second record; the first record of a
step wins in replay anyway) and safe to kill at any point: each record is one append,
there or not, and a pass is as safe to kill as any cleaner pass; a run after a kill
finishes the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyspark_durable.wal.format.records import LostRecord
from pyspark_durable.wal.namespace import Namespace
from pyspark_durable.wal.progress import Progress
from pyspark_durable.wal.upkeep.check import run_check
from pyspark_durable.wal.upkeep.check_report import CheckReport, Fix
from pyspark_durable.wal.upkeep.cleaner import Cleaner


@dataclass
class RepairReport:
    after: CheckReport  # check once the repair is done: what is left needs a backup
    recorded: dict[int, str] = field(default_factory=dict)  # step -> why, by this run
    already: list[int] = field(default_factory=list)  # steps recorded lost before it
    replaced_snapshots: list[int] = field(default_factory=list)  # by its cleaner pass


def repair(ns: Namespace, progress: Progress | None = None) -> RepairReport:
    """Record the steps ``check`` finds lost, rewrite damaged snapshots; see the module."""
    found = run_check(ns.store, progress)
    known = dict(ns.ledger.refreshed().lost)  # step -> why, recorded before this run
    recorded: dict[int, str] = {}
    for problem in found.problems:
        step = problem.where.get("step")
        if problem.fix is Fix.RESTORE and isinstance(step, int) and step not in known:
            recorded.setdefault(step, problem.text())
    for step, why in sorted(recorded.items()):
        ns.ledger.append(LostRecord(step, why))
    replaced = list(Cleaner(ns).run_once(progress).replaced) \
        if any(p.fix is Fix.CLEAN for p in found.problems) else []
    return RepairReport(run_check(ns.store, progress), recorded, sorted(known), replaced)
