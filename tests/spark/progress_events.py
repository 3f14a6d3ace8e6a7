"""Wait on running queries' progress events (one StreamingQueryListener for the suite),
never by polling."""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming import StreamingQueryListener

WAIT_S = 240.0  # first micro-batches take tens of seconds on a loaded 2-core machine


class ProgressEvents(StreamingQueryListener):
    """Every progress event per query id, each as (monotonic arrival, progress dict), and
    how each query terminated. Events arrive seconds late under load: they tell that a
    batch ran and when it started (the JVM's timestamp), not when the test saw it."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.events: dict[str, list[tuple[float, dict]]] = {}
        self.terminated: dict[str, str | None] = {}

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        progress = json.loads(event.progress.json)
        with self.cond:
            self.events.setdefault(progress["id"], []).append((time.monotonic(), progress))
            self.cond.notify_all()

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        with self.cond:
            self.terminated[str(event.id)] = event.exception
            self.cond.notify_all()

    def of(self, query) -> list[tuple[float, dict]]:
        with self.cond:
            return list(self.events.get(str(query.id), []))

    def with_rows(self, query) -> list[tuple[float, dict]]:
        """The events of batches that read rows."""
        return [(t, p) for t, p in self.of(query) if p["numInputRows"] > 0]

    def rows_of(self, query) -> int:
        """Rows ``query``'s batches read so far."""
        return sum(p["numInputRows"] for _, p in self.of(query))

    def batches_of(self, query, since_ms: float = 0.0) -> int:
        """Batches with rows of ``query`` that started after ``since_ms`` (epoch ms)."""
        return len({p["batchId"] for _, p in self.with_rows(query)
                    if dt.datetime.fromisoformat(p["timestamp"]).timestamp() * 1000 > since_ms})

    def wait_until(self, queries, done: Callable[[], bool], what: str,
                   timeout_s: float = WAIT_S) -> None:
        """Wait on events for ``done()``; fail if one of ``queries`` (a query or a list)
        stops first, or on timeout, naming ``what`` was awaited."""
        ids = {str(q.id) for q in (queries if isinstance(queries, list) else [queries])}
        with self.cond:
            reached = self.cond.wait_for(lambda: done() or bool(ids & set(self.terminated)),
                                         timeout=timeout_s)
            stopped = {i: self.terminated[i] for i in ids & set(self.terminated)}
            rows = {i: sum(p["numInputRows"] for _, p in self.events.get(i, [])) for i in ids}
        assert not stopped or done(), f"a query stopped while waiting for {what}: {stopped}"
        assert reached, f"timed out after {timeout_s:.0f}s waiting for {what}; rows so far {rows}"

    def wait_terminated(self, query, timeout_s: float = WAIT_S) -> str | None:
        """Wait until ``query`` terminates; its exception text (None if it stopped cleanly)."""
        qid = str(query.id)
        with self.cond:
            ok = self.cond.wait_for(lambda: qid in self.terminated, timeout=timeout_s)
            assert ok, f"query {query.name} did not terminate within {timeout_s:.0f}s"
            return self.terminated[qid]
