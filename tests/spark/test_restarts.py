"""A query whose Python process missed Spark's fixed time to connect back is started again
(spark/restarts.py), a bounded number of times; every other failure raises at once.

Spark itself gives the process its 10 s. The real failure was forced once by hand, not
in the suite (it costs a Spark start and the wait): a Python executable that slept 12 s
before starting ``python_streaming_source_runner`` in a crash-test child made its query
fail so, and the crash test's restart carried it through. Here the rule the demo, the
benchmarks and the crash test rely on is checked on queries whose ``awaitTermination``
raises what Spark raises."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException

from pyspark_durable.spark.restarts import CONNECT_BACK, await_restarting, missed_connect_back

MISSED = ("[STREAM_FAILED] Query [id = q] terminated with exception: org.apache.spark."
          f"SparkException: {CONNECT_BACK}. SQLSTATE: XXKST")


class Query:
    """A started query that ends with ``error`` (None: it finished)."""

    def __init__(self, error: str | None) -> None:
        self.error = error

    def awaitTermination(self) -> None:
        if self.error is not None:
            raise StreamingQueryException(message=self.error)


def starts(*errors: str | None):
    """``start()`` for queries that end with ``errors`` in turn; and the ones started."""
    started: list[Query] = []

    def start() -> Query:
        started.append(Query(errors[len(started)]))
        return started[-1]

    return start, started


def test_a_missed_connect_back_is_started_again_until_the_query_ends():
    """This tests that a query failing with Spark's connect-back error is started again
    (the caller told of each failed query, in order) and the one that ended is returned."""
    start, started = starts(MISSED, MISSED, None)
    told: list[Query] = []
    ended = await_restarting(start, restarts=2, on_restart=told.append)
    assert len(started) == 3
    assert told == started[:2]
    assert ended is started[2]


def test_restarts_are_bounded_and_the_last_failure_raises():
    """This tests that after ``restarts`` restarts the next connect-back failure raises
    Spark's own exception, not a loop or a silent return."""
    start, started = starts(MISSED, MISSED, MISSED, None)
    with pytest.raises(StreamingQueryException, match=CONNECT_BACK):
        await_restarting(start, restarts=2)
    assert len(started) == 3


def test_any_other_failure_raises_at_once():
    """This tests that a query failing for any other reason is never started again: a
    restart must not hide a real failure."""
    start, started = starts("[STREAM_FAILED] ... DurableWalError: the WAL was recreated",
                            None)
    with pytest.raises(StreamingQueryException, match="recreated"):
        await_restarting(start, restarts=2)
    assert len(started) == 1


def test_missed_connect_back_names_only_that_failure():
    assert missed_connect_back(StreamingQueryException(message=MISSED))
    assert missed_connect_back(MISSED)
    assert not missed_connect_back(None)
    assert not missed_connect_back("Python worker exited unexpectedly (crashed)")
