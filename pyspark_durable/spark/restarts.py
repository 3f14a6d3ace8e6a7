"""Queries whose Python process on the driver missed Spark's fixed time to connect back.

Every Python source or sink query starts a Python process on the driver (the planner
of its reads or its writes), and Spark 4.3 gives such a process a fixed 10 s to start
and connect back, which no setting changes. On a loaded driver (other jobs, several
queries starting at once) its imports can take longer, and the query fails with
``Python worker failed to connect back`` before or at a micro-batch. Nothing of that
batch is committed: the query restarted from its checkpoint goes on exactly once
(docs/operations.md says so to users). This module names that failure once, for the
demo, the benchmarks and the tests that restart such a query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

CONNECT_BACK = "Python worker failed to connect back"


def missed_connect_back(error: BaseException | str | None) -> bool:
    """Whether ``error`` (a query's exception, or its text) is that failure."""
    return error is not None and CONNECT_BACK in str(error)


def await_restarting(start: Callable[[], Any], restarts: int = 2,
                     on_restart: Callable[[Any], None] | None = None) -> Any:
    """Start a query with ``start()`` (from its checkpoint) and wait for its end; a query
    that failed because a Python process missed its time to connect back is started
    again, at most ``restarts`` times (``on_restart(failed query)`` before each). Any
    other failure, or one more, raises as ``awaitTermination`` does. The query that
    ended is returned."""
    from pyspark.errors import StreamingQueryException

    for attempt in range(restarts + 1):
        query = start()
        try:
            query.awaitTermination()
        except StreamingQueryException as exc:
            if not missed_connect_back(exc) or attempt == restarts:
                raise
            if on_restart is not None:
                on_restart(query)
            continue
        return query
    raise AssertionError("unreachable: the last attempt returns or raises")
