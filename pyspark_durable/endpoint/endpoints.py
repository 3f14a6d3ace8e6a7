"""The seed's endpoint interfaces (see the package docstring for step semantics)."""

from __future__ import annotations

import logging
from typing import Protocol, runtime_checkable

import pyarrow as pa

from pyspark_durable.errors import ConfigError, StepNotCommitted
from pyspark_durable.wal import DEFAULT_TABLE, Attempt, Namespace, StepBatch
from pyspark_durable.wal.arguments import check_step_arg, check_writer

log = logging.getLogger(__name__)


@runtime_checkable
class InputConsumer(Protocol):
    """Receives the batches of a step, then ``eoi()``."""

    def push(self, batch: StepBatch) -> None: ...

    def eoi(self) -> None: ...


class DurableInputEndpoint:
    """Reads committed steps of a namespace (optionally some tables or regions only)."""

    def __init__(self, ns: Namespace, reader_id: str | None = None,
                 tables: set[int] | None = None, regions: set[int] | None = None,
                 hold_retention: bool = False) -> None:
        self.ns = ns
        self.reader_id = reader_id
        self.tables = tables
        self.regions = regions
        self.hold_retention = hold_retention

    def steps(self) -> range:
        """Committed steps readable without blocking."""
        return self.ns.steps()

    def read(self, step: int, consumer: InputConsumer) -> None:
        """Feed every batch of ``step`` to ``consumer``, then call ``consumer.eoi()``."""
        for batch in self.ns.read_step(step, self.tables, self.regions):
            consumer.push(batch)
        consumer.eoi()

    def commit(self, step: int) -> None:
        """The consumer has durably processed ``step``: record it for this reader.

        With ``hold_retention``, the namespace's retention policy keeps every step
        after ``step`` until this reader commits it (see :meth:`Namespace.commit_reader`).
        """
        check_step_arg("step", step, self.ns.name)
        if step >= self.ns.steps().stop:
            raise StepNotCommitted(f"cannot commit step {step}: it is not committed yet",
                                   namespace=self.ns.name, step=step)
        if self.reader_id is not None:
            self.ns.commit_reader(self.reader_id, step + 1, self.hold_retention)

    def committed(self) -> int | None:
        """The last step this reader committed, or None (needs a ``reader_id``)."""
        if self.reader_id is None:
            return None
        self.ns.refresh()
        position = self.ns.info.reader_position(self.reader_id)
        return None if position is None else position.next_step - 1

    def expire(self, step: int) -> None:
        """Steps below ``step`` are no longer needed; the cleaner may delete them."""
        self.ns.expire(step)


class OutputEndpoint:
    """Step-idempotent writer: one ``writer_id``, steps named by the caller."""

    def __init__(self, ns: Namespace, writer_id: str, table: int | str = DEFAULT_TABLE,
                 region_id: int = 0, payload_format: str = "arrow") -> None:
        if not writer_id:
            raise ConfigError("an output endpoint needs a non-empty writer_id", namespace=ns.name)
        self.ns = ns
        self.writer_id = writer_id
        self.table = table
        self.region_id = region_id
        self.payload_format = payload_format
        self._step: int | None = None
        self._attempt: Attempt | None = None
        self._done: int | None = None
        self._expired_before = 0

    def start_step(self, step: int) -> None:
        """Start writer step ``step``; an uncommitted earlier attempt of it is discarded."""
        check_writer(self.writer_id, step, self.ns.name)  # an integer >= 0, before comparing
        if step < self._expired_before:
            raise ConfigError(f"writer step {step} was expired by expire_step",
                              namespace=self.ns.name, writer=self.writer_id)
        self._step = step
        self._done = self.ns.committed_step(self.writer_id, step)
        newest = self.ns.info.newest_committed_writer_step(self.writer_id)
        if newest is not None and newest > step:
            log.warning("namespace=%s writer=%s: writing step %d again although steps up to %d "
                        "are committed", self.ns.name, self.writer_id, step, newest)
        self._attempt = None if self._done is not None else self.ns.begin(self.writer_id, step)

    def push_buffer(self, data: pa.Table | pa.RecordBatch, table: int | str | None = None,
                    region_id: int | None = None) -> int:
        """Write rows into the current step (ignored if the step already committed)."""
        if self._step is None:
            raise ConfigError("push_buffer before start_step", namespace=self.ns.name)
        if self._attempt is None:
            return 0
        return self._attempt.write(self.table if table is None else table, data,
                                   self.region_id if region_id is None else region_id,
                                   self.payload_format)

    def commit_step(self) -> int:
        """Make what was pushed since ``start_step`` one committed step; return its number."""
        if self._step is None:
            raise ConfigError("commit_step before start_step", namespace=self.ns.name)
        if self._attempt is None:
            assert self._done is not None
            return self._done
        step = self._attempt.commit()
        self._attempt, self._done = None, step
        return step

    def expire_step(self, step: int) -> None:
        """Writer steps below ``step`` need no tracking any more."""
        check_step_arg("expire step", step, self.ns.name)
        self._expired_before = max(self._expired_before, step)
