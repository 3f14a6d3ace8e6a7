"""Wait on a running query's progress events (a StreamingQueryListener), never by polling."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from pyspark.sql.streaming import StreamingQueryListener

WAIT_S = 240.0  # first micro-batches take tens of seconds on a loaded 2-core machine


class ProgressEvents(StreamingQueryListener):
    """Every progress event per query id, each as (monotonic arrival, progress dict)."""

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

    def wait_until(self, query, done: Callable[[], bool], what: str,
                   timeout_s: float = WAIT_S) -> None:
        """Wait on events for ``done()``; fail if the query stops first, or on timeout."""
        qid = str(query.id)
        with self.cond:
            reached = self.cond.wait_for(lambda: qid in self.terminated or done(),
                                         timeout=timeout_s)
            stopped = self.terminated.get(qid, "(running)")
        assert qid not in self.terminated or done(), \
            f"query {query.name} stopped while waiting for {what}: {stopped}"
        assert reached, f"timed out after {timeout_s:.0f}s waiting for {what}"
