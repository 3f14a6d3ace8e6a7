"""Steps named by time: where a read given a commit timestamp starts and ends.

The meaning is that of Spark's Kafka source (``startingTimestamp``,
``endingTimestamp``) with steps for offsets and a step's commit time for a record's
timestamp: a read starts at the first step committed at or after the start time, and
ends before the first step committed at or after the end time (exclusive, as ending
offsets are). The Spark source, :func:`~pyspark_durable.endpoint.api.read_steps` and
``durablewal tail --since`` all ask here.
"""

from __future__ import annotations

import time

from pyspark_durable.errors import StepNotCommitted
from pyspark_durable.times import iso
from pyspark_durable.wal import Namespace


def first_step_since(ns: Namespace, timestamp_ms: int, what: str, stream: bool = False) -> int:
    """The first step committed at or after ``timestamp_ms``, as of ``ns``'s last refresh.

    A time after the last commit is :class:`StepNotCommitted` naming the committed steps
    and their times, except for a ``stream`` when the time is not in the future: every
    step committed from now on is after it, so the stream starts at the next step. A
    step found below the retained ones is returned as it is: the caller's expired-step
    rule (``failOnDataLoss``) decides.
    """
    steps = ns.steps(refresh=False)
    step = ns.info.first_step_committed_at(timestamp_ms)
    if step < steps.stop:
        return step
    if stream and timestamp_ms <= time.time() * 1000:
        return steps.stop
    if len(steps):
        first, last = ns.step_commit(steps.start), ns.step_commit(steps.stop - 1)
        exists = (f"committed steps [{steps.start}, {steps.stop}) were committed from "
                  f"{iso(first.timestamp_ms)} to {iso(last.timestamp_ms)}")
    else:
        exists = f"no step is retained (the next step is {steps.stop})"
    later = " and is in the future" if timestamp_ms > time.time() * 1000 else ""
    raise StepNotCommitted(f"{what}={iso(timestamp_ms)} is after the last commit{later}: "
                           f"no step was committed at or after it; {exists}",
                           namespace=ns.name, step=steps.stop)


def end_step_for(ns: Namespace, timestamp_ms: int) -> int:
    """The end (exclusive) of a read to ``timestamp_ms``: the first step committed at or
    after it, or the next step when every step was committed before it."""
    return min(ns.info.first_step_committed_at(timestamp_ms), ns.steps(refresh=False).stop)


def first_step_reaching(ns: Namespace, micros: int, what: str, stream: bool = False) -> int:
    """The first retained step whose recorded event time reaches ``micros`` (its max at or
    after it), as of ``ns``'s last refresh; steps without one are never it. None found:
    a ``stream`` starts at the next step, a batch read is :class:`StepNotCommitted`."""
    steps = ns.steps(refresh=False)
    for step in steps:
        span = ns.step_commit(step).event_time
        if span is not None and span[1] >= micros:
            return step
    if stream:
        return steps.stop
    raise StepNotCommitted(f"{what}={iso(micros // 1000)}: no retained step (of "
                           f"[{steps.start}, {steps.stop})) has rows with an event time at or "
                           "after it", namespace=ns.name, step=steps.stop)

