"""Endpoints: the public API over the WAL (the Spark source and sink use it too).

Step semantics, written once:

* A **step** is one atomic, committed unit of writes across any regions of a
  namespace. Steps are numbered 0, 1, 2, ... in commit order, with no gaps.
* A reader sees all of a step or none of it. Reading step N twice gives the same
  rows, in the same order, with the same sequence numbers, until N is expired.
* A writer names each step it writes ``(writer_id, writer_step)``. Committing a pair
  that is already committed is a no-op that returns the existing step, so a retried
  task or a batch replayed after a crash never adds rows. Rows written by an
  attempt that never committed (crashed, failed, aborted, superseded) are never
  visible.
* ``DurableInputEndpoint.steps()`` is the range of committed steps readable now;
  ``read(step, consumer)`` feeds the step's batches and then ``consumer.eoi()``;
  ``commit(step)`` records that the consumer durably processed ``step``;
  ``expire(step)`` says steps below ``step`` are no longer needed (the cleaner may
  then delete them; reading them raises :class:`~pyspark_durable.errors.StepExpired`).
* ``OutputEndpoint.start_step(step)`` starts writing writer step ``step``; writing a
  step again discards what an earlier, uncommitted attempt wrote for it, and is a
  no-op once that step committed. ``push_buffer`` adds rows; ``commit_step`` makes
  them one step; ``expire_step`` forgets tracking of steps below ``step``.
"""

from pyspark_durable.endpoint.api import read_batches, read_steps, write_step
from pyspark_durable.endpoint.config import (
    EndpointConfig,
    input_endpoint,
    is_wal_namespace,
    load_config,
    open_namespace,
    output_endpoint,
    wal_namespaces,
)
from pyspark_durable.endpoint.endpoints import (
    DurableInputEndpoint,
    InputConsumer,
    OutputEndpoint,
)

__all__ = [
    "DurableInputEndpoint",
    "EndpointConfig",
    "InputConsumer",
    "OutputEndpoint",
    "input_endpoint",
    "is_wal_namespace",
    "load_config",
    "open_namespace",
    "output_endpoint",
    "read_batches",
    "read_steps",
    "wal_namespaces",
    "write_step",
]
